"""Pending pods the scheduler cannot place, and the stable part of what it says of them (what
is short), which does not change from one scheduling attempt to the next."""

from __future__ import annotations

import re
from typing import Any

from llmfleet.reconcile.machinery.conditions import FALSE


def unschedulable_pods(pods: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    found = []
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Pending":
            continue
        for c in (p.get("status") or {}).get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == FALSE
                and c.get("reason") == "Unschedulable"
            ):
                found.append((p["metadata"]["name"], c.get("message", "")))
    return found


GPU_SHORTAGE = "Insufficient nvidia.com/gpu"
_SHORTAGE = re.compile(
    r"Insufficient [\w./-]*\w|Too many pods|didn't match [^,.]+"
    # What the scheduler's volume binding says of a pod's claims (spec.model.cache): missing,
    # going, unbound, or no volume to bind.
    r'|persistentvolumeclaim "[^"]+" (?:not found|is being deleted'
    r'|bound to non-existent persistentvolume "[^"]+")'
    r"|unbound immediate PersistentVolumeClaims|didn't find available persistent volumes to bind"
)


def shortages_in(message: str) -> set[str]:
    return set(_SHORTAGE.findall(message))
