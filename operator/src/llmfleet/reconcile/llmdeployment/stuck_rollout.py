"""A rollout that a full GPU pool would hold forever: pods of an earlier template that serve
nothing (never started, crash-looping) keep their GPUs, while the new template's pods wait
Pending for GPUs. The engine Deployment surges (maxSurge 1, maxUnavailable 0), and upstream's
Deployment controller scales an old ReplicaSet's unhealthy pods down only within
maxUnavailable (pkg/controller/deployment/rolling.go, reconcileOldReplicaSets: maxScaledDown =
allPods - minAvailable - newRSUnavailable, 0 here), so the user's fix never lands. The pods found
here are what render/rollout_strategy.py lets the controller replace first.

Pure readings of the pods: the same pods give the same answer, so the rendered strategy does not
flip between reconciles while nothing changes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmfleet.planner import Plan
from llmfleet.reconcile.machinery.scheduler_words import (
    GPU_SHORTAGE,
    shortages_in,
    unschedulable_message,
)
from llmfleet.render.names import (
    COMPONENT_ENGINE,
    COMPONENT_LABEL,
    ENGINE_CONTAINER,
    LAYOUT_LABEL,
    layout_id,
)

# The Deployment controller's label naming a pod's template (its ReplicaSet).
TEMPLATE_HASH_LABEL = "pod-template-hash"
# Waiting reasons of a container on its way up: the image pulled, volumes mounted. Any other
# reason (RunContainerError, CrashLoopBackOff, CreateContainerConfigError, ImagePullBackOff...)
# is the kubelet refusing or failing it.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


def ready(pod: dict[str, Any]) -> bool:
    """Whether the pod serves: Ready, so in the Service's endpoints and the router's rotation."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def serves_nothing(pod: dict[str, Any]) -> bool:
    """Whether `pod` holds a node's resources (it is bound) and its engine failed: not Ready,
    and restarted or refused by the kubelet. A pod still starting for the first time is not
    counted, however long it takes: its startup probe's budget ends in a restart, which is."""
    if not bound(pod) or ready(pod):
        return False
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != ENGINE_CONTAINER:
            continue
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        refused = waiting is not None and waiting.get("reason") not in _STARTING
        return bool(cs.get("restartCount")) or refused or "terminated" in state
    return False


def short_of_gpus(pod: dict[str, Any]) -> bool:
    """Whether the scheduler left `pod` Pending because no node has the GPUs it asks for."""
    said = unschedulable_message(pod)
    return said is not None and GPU_SHORTAGE in shortages_in(said)


def pods_to_replace_first(pods: Iterable[dict[str, Any]], plan: Plan) -> tuple[str, ...]:
    """The names of the engine pods of the plan's layout that serve nothing, hold GPUs and are of
    another template than pods waiting for GPUs, sorted; () when no pod waits for GPUs, and for
    a multi-node layout (a LeaderWorkerSet replaces groups by index, not by health, so a larger
    maxUnavailable there could stop a serving group). Replacing them costs no availability;
    waiting for them never ends."""
    if plan.pipeline_parallel_size > 1:
        return ()
    engines = [p for p in layout_engines(pods, plan) if not deleting(p)]
    waiting = {template(p) for p in engines if short_of_gpus(p)}
    if not waiting:
        return ()
    return tuple(
        sorted(
            p["metadata"]["name"]
            for p in engines
            if template(p) not in waiting and serves_nothing(p)
        )
    )


def layout_engines(pods: Iterable[dict[str, Any]], plan: Plan) -> list[dict[str, Any]]:
    """The engine pods of the plan's layout, those already going included."""
    layout = layout_id(plan)
    return [
        p
        for p in pods
        if _labels(p).get(COMPONENT_LABEL) == COMPONENT_ENGINE
        and _labels(p).get(LAYOUT_LABEL) == layout
    ]


def template(pod: dict[str, Any]) -> str | None:
    """The pod's template, as its ReplicaSet names it."""
    return _labels(pod).get(TEMPLATE_HASH_LABEL)


def deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def bound(pod: dict[str, Any]) -> bool:
    """Whether the pod was given a node, and with it the GPUs it asks for."""
    return bool((pod.get("spec") or {}).get("nodeName"))
