"""Preempted shard pods, from what Kubernetes writes on them: pure functions, and one read of the
scheduler's Event through the EventRecorder (`preemptor`).

kube-scheduler (pkg/scheduler/framework/preemption) marks each victim before deleting it with the
condition `DisruptionTarget=True`, reason `PreemptionByScheduler`, message `<scheduler name>:
preempting to accommodate a higher priority pod`, which names the scheduler, not the preemptor.
The preemptor is named only by the Event it posts on the victim: reason `Preempted`, message
`Preempted by pod <preemptor uid> on node <node>`, with the preemptor as the Event's related
object (read by `preemptor`, the one function here that asks the cluster).

Evictions and drains mark the pod DisruptionTarget too (reasons EvictionByEvictionAPI,
DeletionByTaintManager, TerminationByKubelet, ...): like a preemption, the Job's podFailurePolicy
does not count them as failures, but only the scheduler's are a job's preemptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmfleet.reconcile.machinery.events import EventRecorder

DISRUPTION_TARGET = "DisruptionTarget"
BY_SCHEDULER = "PreemptionByScheduler"
PREEMPTED_EVENT = "Preempted"
# Shards named in a condition message; the rest are counted.
NAMED = 5


@dataclass(frozen=True)
class Preemption:
    """One victim pod: its name and uid, when, and the scheduler's words."""

    pod: str
    uid: str
    at: str  # the condition's lastTransitionTime, as the API server wrote it
    said: str  # the condition's message


def disruption(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's DisruptionTarget=True condition: it is being (or was) stopped by Kubernetes,
    not by a fault of its own."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            found: Mapping[str, Any] = c
            return found
    return None


def preemption(pod: Mapping[str, Any]) -> Preemption | None:
    """The scheduler's preemption of `pod`, if it preempted it."""
    c = disruption(pod)
    if c is None or c.get("reason") != BY_SCHEDULER:
        return None
    meta = pod.get("metadata") or {}
    return Preemption(
        pod=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        at=str(c.get("lastTransitionTime") or ""),
        said=str(c.get("message") or BY_SCHEDULER),
    )


def preempted_now(pods: Sequence[Mapping[str, Any]]) -> Preemption | None:
    """Why a shard waits, from its pods oldest first: its newest pod that got as far as a node was
    preempted (it is stopping, or its replacement waits for a GPU)."""
    for pod in reversed(pods):
        if (pod.get("status") or {}).get("phase") in (None, "Pending") and disruption(pod) is None:
            continue  # a replacement not yet running
        return preemption(pod)
    return None


def still_preempted(
    pods: Sequence[Mapping[str, Any]], was_preempted: bool, by: str | None
) -> Preemption | None:
    """A shard whose status said Preempted and whose victim pod is gone: the kubelet deletes a
    preempted pod once it has stopped (the deletion the scheduler asked for), the Job's
    replacement may wait for a GPU for hours, and only status remembers why. Preempted still
    while no pod of the shard got as far as running; `by` is who status said preempted it."""
    if not was_preempted:
        return None
    for pod in pods:
        if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            return None
    return Preemption(pod="", uid="", at="", said=by or BY_SCHEDULER)


def preemptor_of(event: Mapping[str, Any]) -> str | None:
    """Who preempted, from the scheduler's Preempted Event on the victim: `pod NS/NAME on node
    N` (the related object and the message's node), else the message's own words."""
    message = str(event.get("message") or "")
    related = event.get("related") or {}
    node = message.rsplit(" on node ", 1)[1] if " on node " in message else ""
    if related.get("name"):
        where = f" on node {node}" if node else ""
        return f"pod {related.get('namespace') or '?'}/{related['name']}{where}"
    return message.removeprefix("Preempted by ") or None


def preemptor(events: EventRecorder, namespace: str, uid: str) -> str | None:
    """Who preempted the pod `uid`, from the scheduler's Preempted Event on it; None when no such
    Event can be read (yet, or any more: Events expire)."""
    for event in events.related(namespace, uid, PREEMPTED_EVENT):
        who = preemptor_of(event)
        if who:
            return who
    return None


def describe(shards: Mapping[int, Preemption], preemptors: Mapping[str, str | None]) -> str:
    """`shard 0 by pod a/b on node n; shards 1, 2 by default-scheduler: ...`: who preempted which
    shards, the preemptor where its Event was read, else the scheduler's condition message."""
    groups: dict[str, list[int]] = {}
    for index, p in sorted(shards.items()):
        groups.setdefault(preemptors.get(p.uid) or p.said, []).append(index)
    parts = []
    for who, indexes in list(groups.items())[:NAMED]:
        named = ", ".join(str(i) for i in indexes[:NAMED])
        more = f" and {len(indexes) - NAMED} more" if len(indexes) > NAMED else ""
        parts.append(f"shard{'s' if len(indexes) > 1 else ''} {named}{more} by {who}")
    if len(groups) > NAMED:
        parts.append(f"{len(groups) - NAMED} more preemptor(s)")
    return "; ".join(parts)
