"""What the pod specs of the engines, the batch runners and the router share: the restricted
security context they run under, and the engines' node pool they are placed in."""

from __future__ import annotations

from typing import Any

from llmfleet.planner import Plan
from llmfleet.render.modelpod import GPU_RESOURCE

# The images' user is root; this id makes them run unprivileged with a writable HOME and cache.
RUN_AS = 1000


def pod_security_context(*, fs_group: bool) -> dict[str, Any]:
    """Non-root with the runtime's seccomp profile; `fs_group` makes the mounted volumes (the
    model cache, claims) writable by RUN_AS."""
    context: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS}
    if fs_group:
        context["fsGroup"] = RUN_AS
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def node_placement(plan: Plan) -> dict[str, Any]:
    """The pod spec's tolerations and nodeSelector for the plan's node pool: the GPU taint
    tolerated where the plan uses GPUs, plus the plan's own tolerations and node selector."""
    placement: dict[str, Any] = {}
    if plan.gpus_per_replica:
        placement["tolerations"] = [
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
            *plan.tolerations,
        ]
    if plan.node_selector:
        placement["nodeSelector"] = dict(plan.node_selector)
    return placement
