"""How the engine Deployment replaces its pods when its template changes.

Normally it surges: the new pod starts on a free GPU and an old one goes only once the new one is
Ready (maxSurge 1, maxUnavailable 0), so a healthy fleet never serves less during a rollout. On a
full GPU pool that surge pod waits for a GPU, forever unless one frees up, since the Deployment
controller removes an old ReplicaSet's pods only within maxUnavailable. Two cases need not wait:

- old pods that hold the GPUs serve nothing (crash-looping, never started): the strategy lets the
  controller replace exactly those first, and surge no more; replacing them costs nothing.
- every old pod serves and the fleet has 2 or more: the strategy replaces one pod at a time in
  place (maxSurge 0, maxUnavailable 1), the disruption the fleet's PodDisruptionBudget
  (render/autoscaling.py, maxUnavailable 1) already accepts. The Deployment carries
  ONE_AT_A_TIME_ANNOTATION meanwhile: the roll's memory, so a reconcile between two
  replacements, when no pod happens to wait for a GPU, keeps the strategy instead of surging
  again (reconcile/llmdeployment/full_pool_roll.py).
"""

from __future__ import annotations

from typing import Any

SURGE = {"maxSurge": 1, "maxUnavailable": 0}
# As many as the PodDisruptionBudget lets go at once (render_pdb's maxUnavailable).
ONE_AT_A_TIME = {"maxSurge": 0, "maxUnavailable": 1}
ONE_AT_A_TIME_ANNOTATION = "llmfleet.dev/rolling-one-at-a-time"


def rollout_strategy(replace_first: int, *, one_at_a_time: bool = False) -> dict[str, Any]:
    """The engine Deployment's strategy, given how many of its pods of an earlier template serve
    nothing while holding the GPUs that the new template's pods wait for (0: none, or there is
    no such wait), and whether a healthy fleet rolls one pod at a time on a full pool."""
    if replace_first > 0:
        rolling = {"maxSurge": 0, "maxUnavailable": replace_first}
    else:
        rolling = ONE_AT_A_TIME if one_at_a_time else SURGE
    return {"type": "RollingUpdate", "rollingUpdate": dict(rolling)}


def rollout_annotations(one_at_a_time: bool) -> dict[str, str]:
    """The engine Deployment's own annotations (not its pods'): the mark of a roll one pod at a
    time, while it lasts."""
    return {ONE_AT_A_TIME_ANNOTATION: "true"} if one_at_a_time else {}
