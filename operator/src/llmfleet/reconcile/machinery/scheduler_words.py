"""What the scheduler says of a pod it cannot place, in the pod's `PodScheduled=False` condition
(its FailedScheduling Event says the same): `0/N nodes are available: C1 WHY1, C2 WHY2.`, then
what preemption would do. Pure readings of that message, shared by both kinds' status code."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

GPU_SHORTAGE = "Insufficient nvidia.com/gpu"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TAINTED = "had untolerated taint"
CORDONED = "were unschedulable"
# Reasons a node fails that say nothing about whether it carries the GPU asked for.
NOT_ABOUT_THE_GPU = (TAINTED, CORDONED, SELECTOR_MISMATCH)
_NODES_SAID = re.compile(r"0/(\d+) nodes are available: (.*)$")
_SHORTAGE = re.compile(
    r"Insufficient [\w./-]*\w|Too many pods|didn't match [^,.]+"
    # What the scheduler's volume binding says of a pod's claims (spec.model.cache): missing,
    # going, unbound, or no volume to bind.
    r'|persistentvolumeclaim "[^"]+" (?:not found|is being deleted'
    r'|bound to non-existent persistentvolume "[^"]+")'
    r"|unbound immediate PersistentVolumeClaims|didn't find available persistent volumes to bind"
)
LIMIT = 300


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    """What the scheduler said of `pod` while it is Pending and unplaced; None otherwise."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for c in status.get("conditions") or []:
        scheduled = c.get("type") == "PodScheduled" and c.get("status") == "False"
        if scheduled and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return None


def shortages_in(message: str) -> set[str]:
    """What is short, the part of the message that does not change between attempts."""
    return set(_SHORTAGE.findall(message))


def _parts(message: str) -> tuple[int, list[tuple[int, str]]] | None:
    """The scheduler's `0/N nodes are available: C1 WHY1, C2 WHY2.` as N and (count, why)."""
    head = message.split(" preemption:", 1)[0].strip().rstrip(".")
    found = _NODES_SAID.match(head)
    if found is None:
        return None
    # The nodes' reasons end at the first full stop; what follows is the PostFilter plugins'
    # (`no new claims to deallocate,` of dynamic resources, `not found`), about no node.
    reasons = found.group(2).split(". ", 1)[0].rstrip(".,")
    parts = []
    for part in re.split(r", (?=\d+ )", reasons):
        count, _, said = part.partition(" ")
        parts.append((int(count) if count.isdigit() else 0, said if count.isdigit() else part))
    return int(found.group(1)), parts


def every_node_fails_for(message: str, about: Sequence[str], needed: str) -> bool:
    """Whether every node the scheduler counted fails for one of `about`, `needed` among them."""
    said = _parts(message)
    if said is None or needed not in message:
        return False
    total, parts = said
    if not all(any(a in why for a in about) for _, why in parts):
        return False
    return sum(count for count, _ in parts) == total


def only_selector_mismatch(message: str) -> bool:
    """Whether the scheduler found no node matching the pod's nodeSelector among those it may
    use: every node either does not match or is tainted / cordoned, and at least one does not
    match. (A node that matches but is full says `Insufficient ...` instead.)"""
    return every_node_fails_for(message, NOT_ABOUT_THE_GPU, SELECTOR_MISMATCH)


def stable_part(message: str) -> str:
    """What the scheduler says without the node counts, which change as nodes come and go: the
    same on every attempt, so a Pending pod does not rewrite status on every retry."""
    said = _parts(message)
    if said is None:
        return message.split(" preemption:", 1)[0].strip().rstrip(".")[:LIMIT]
    return ", ".join(sorted({why for _, why in said[1]}))[:LIMIT]
