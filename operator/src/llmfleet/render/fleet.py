"""Everything one LLMDeployment renders, in a deterministic order."""

from __future__ import annotations

from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.autoscaling import render_hpa, render_pdb
from llmfleet.render.engine import render_engine
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.leaderworkerset import (
    LWS_API_VERSION,
    LWS_KIND,
    render_leaderworkerset,
)
from llmfleet.render.names import Owner
from llmfleet.render.network_policy import render_network_policy
from llmfleet.render.router import render_router
from llmfleet.render.scaledobject import (
    KEDA_API_VERSION,
    SCALED_OBJECT_KIND,
    render_scaled_object,
)
from llmfleet.render.service import render_service
from llmfleet.render.standby import render_standby

# Every kind an LLMDeployment renders, in apply order (what others refer to comes first).
# The operator's view of its children (reconcile/machinery/cache.py) lists and watches each of them,
# and pruning reads that view, so the operator's RBAC must allow `list` and `watch` on every one.
MANAGED_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    # Before the pods it protects exist.
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "Service"),
    # The standby engines' dev-mode fence, before the pods that mount it.
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    # Multi-node layouts; an API the cluster may not serve (the view then holds none).
    (LWS_API_VERSION, LWS_KIND),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    # Scale to zero; an API the cluster may not serve, like LeaderWorkerSet's.
    (KEDA_API_VERSION, SCALED_OBJECT_KIND),
    ("policy/v1", "PodDisruptionBudget"),
)
_KIND_ORDER = [kind for _, kind in MANAGED_KINDS]


def render_fleet(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, fleet: FleetDefaults
) -> list[dict[str, Any]]:
    """Every child of the LLMDeployment; `fleet` (from the operator's settings) gives the engine
    image when spec.engine.image is unset, the engines' PriorityClass, the adapter fetcher's
    image, the engines' NetworkPolicy (None: none) and the Prometheus a scale-to-zero
    ScaledObject queries."""
    engines = render_leaderworkerset if plan.pipeline_parallel_size > 1 else render_engine
    objects = [render_service(owner), engines(owner, spec, plan, fleet)]
    objects.extend(render_standby(owner, spec, plan, fleet))
    if fleet.network_policy is not None:
        objects.append(render_network_policy(owner, spec, plan, fleet.network_policy))
    if spec.autoscaling.scales_to_zero:
        objects.append(render_scaled_object(owner, spec, plan, fleet.keda_prometheus_url))
    elif spec.autoscaling.enabled:
        objects.append(render_hpa(owner, spec, plan))
    # A budget only makes sense when losing one pod still leaves one serving.
    if plan.min_replicas > 1:
        objects.append(render_pdb(owner, plan))
    objects.extend(render_router(owner, spec, plan))
    return sorted(objects, key=lambda o: (_KIND_ORDER.index(o["kind"]), o["metadata"]["name"]))
