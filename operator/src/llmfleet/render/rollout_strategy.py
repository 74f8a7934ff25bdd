"""How the engine Deployment replaces its pods when its template changes.

Normally it surges: the new pod starts on a free GPU and an old one goes only once the new one is
Ready (maxSurge 1, maxUnavailable 0), so a healthy fleet never serves less during a rollout. On a
full GPU pool that surge pod waits for a GPU; when the old pods holding the GPUs serve nothing
(crash-looping, never started) it would wait forever, since the Deployment controller removes an
old ReplicaSet's unavailable pods only within maxUnavailable. Then the strategy lets it replace
exactly those pods first, and surge no more: replacing a pod that serves nothing costs nothing.
"""

from __future__ import annotations

from typing import Any

SURGE = {"maxSurge": 1, "maxUnavailable": 0}


def rollout_strategy(replace_first: int) -> dict[str, Any]:
    """The engine Deployment's strategy, given how many of its pods of an earlier template serve
    nothing while holding the GPUs that the new template's pods wait for (0: none, or there is
    no such wait)."""
    rolling = SURGE if replace_first <= 0 else {"maxSurge": 0, "maxUnavailable": replace_first}
    return {"type": "RollingUpdate", "rollingUpdate": dict(rolling)}
