"""Everything one LLMDeployment renders: each child by its role, and all of them in apply order."""

from __future__ import annotations

from dataclasses import dataclass
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
from llmfleet.render.router import RouterObjects, render_router, router_url
from llmfleet.render.scaledobject import (
    KEDA_API_VERSION,
    SCALED_OBJECT_KIND,
    render_scaled_object,
)
from llmfleet.render.service import endpoint_url, render_service
from llmfleet.render.standby import StandbyObjects, render_standby

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


@dataclass(frozen=True)
class RenderedFleet:
    """One LLMDeployment's children by role; `objects()` is what the operator applies, in order."""

    service: dict[str, Any]
    # A Deployment, or a LeaderWorkerSet when a replica spans several nodes.
    engine: dict[str, Any]
    # The URL clients call: the router's when it runs, else the engines' Service's.
    endpoint: str
    standby: StandbyObjects | None = None
    network_policy: dict[str, Any] | None = None
    # An HPA, or a KEDA ScaledObject when the engines scale to zero.
    autoscaler: dict[str, Any] | None = None
    pdb: dict[str, Any] | None = None
    router: RouterObjects | None = None

    @property
    def scaled_object(self) -> dict[str, Any] | None:
        return self.autoscaler if _is_kind(self.autoscaler, SCALED_OBJECT_KIND) else None

    @property
    def hpa(self) -> dict[str, Any] | None:
        return self.autoscaler if _is_kind(self.autoscaler, "HorizontalPodAutoscaler") else None

    def objects(self) -> list[dict[str, Any]]:
        """Every child, sorted by MANAGED_KINDS (what others refer to first), then by name."""
        objects = [self.service, self.engine]
        objects.extend(self.standby.objects() if self.standby else ())
        objects.extend(o for o in (self.network_policy, self.autoscaler, self.pdb) if o)
        objects.extend(self.router.objects() if self.router else ())
        return sorted(objects, key=lambda o: (_KIND_ORDER.index(o["kind"]), o["metadata"]["name"]))


def _is_kind(obj: dict[str, Any] | None, kind: str) -> bool:
    return obj is not None and obj["kind"] == kind


def render_fleet(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
    *,
    replace_first: int = 0,
    one_at_a_time: bool = False,
) -> RenderedFleet:
    """Every child of the LLMDeployment; `fleet` (from the operator's settings) gives the engine
    image when spec.engine.image is unset, the engines' PriorityClass, the adapter fetcher's
    image, the engines' NetworkPolicy (None: none) and the Prometheus a scale-to-zero
    ScaledObject queries. `replace_first`, observed: how many engine pods of an earlier template
    serve nothing while holding the GPUs the new ones wait for; `one_at_a_time`, whether a
    healthy fleet rolls within its disruption budget on a full pool
    (render/rollout_strategy.py)."""
    engine = (
        render_leaderworkerset(owner, spec, plan, fleet)
        if plan.pipeline_parallel_size > 1
        else render_engine(
            owner, spec, plan, fleet, replace_first=replace_first, one_at_a_time=one_at_a_time
        )
    )
    autoscaler = None
    if spec.autoscaling.scales_to_zero:
        autoscaler = render_scaled_object(owner, spec, plan, fleet.keda_prometheus_url)
    elif spec.autoscaling.enabled:
        autoscaler = render_hpa(owner, spec, plan)
    router = render_router(owner, spec, plan, fleet.router_hop_image)
    return RenderedFleet(
        service=render_service(owner),
        engine=engine,
        endpoint=endpoint_url(owner) if router is None else router_url(owner),
        standby=render_standby(owner, spec, plan, fleet),
        network_policy=(
            None
            if fleet.network_policy is None
            else render_network_policy(owner, spec, plan, fleet.network_policy)
        ),
        autoscaler=autoscaler,
        # A budget only makes sense when losing one pod still leaves one serving.
        pdb=render_pdb(owner, plan) if plan.min_replicas > 1 else None,
        router=router,
    )
