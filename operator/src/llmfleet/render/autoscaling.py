"""The HorizontalPodAutoscaler on the queue (vLLM's own, and the requests the router hop holds for
room), and the PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.leaderworkerset import engine_kind
from llmfleet.render.names import (
    Owner,
    engine_deployment_name,
    group_selector,
    metadata,
    selector_labels,
)

# The custom metric prometheus-adapter serves from vLLM's `vllm:num_requests_waiting` gauge, each
# pod's share of the requests the router hop holds added (charts/llmfleet/files): one metric, so
# routers that are not scraped leave it as the engines' own queue instead of failing the HPA.
QUEUE_METRIC = "vllm_num_requests_waiting"
SCALE_UP_PERIOD_SECONDS = 15


def hpa_behavior(spec: LLMDeploymentSpec) -> dict[str, Any]:
    return {
        # A queue means users wait now: add pods at once, doubling if need be.
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 2, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
                {"type": "Percent", "value": 100, "periodSeconds": SCALE_UP_PERIOD_SECONDS},
            ],
        },
        # Model servers start slowly: remove one pod at a time, after a quiet window.
        "scaleDown": {
            "stabilizationWindowSeconds": spec.autoscaling.scale_down_stabilization_seconds,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


def scale_target_ref(owner: Owner, plan: Plan) -> dict[str, str]:
    """The engines of the current layout as an autoscaler's target. A LeaderWorkerSet's scale
    subresource selects its leaders only: the pods that serve, and so the ones whose queue the
    metric reads."""
    api_version, kind = engine_kind(plan)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": engine_deployment_name(owner.name, plan),
    }


def render_hpa(owner: Owner, spec: LLMDeploymentSpec, plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(owner, owner.name),
        "spec": {
            "scaleTargetRef": scale_target_ref(owner, plan),
            "minReplicas": plan.min_replicas,
            "maxReplicas": plan.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": QUEUE_METRIC},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": str(plan.target_queue_depth),
                        },
                    },
                }
            ],
            "behavior": hpa_behavior(spec),
        },
    }


def render_pdb(owner: Owner, plan: Plan) -> dict[str, Any]:
    """At most one engine pod evicted at a time. For a multi-node layout the budget spans every
    pod of every group (a group serves only whole): one pod down takes at most one group down.
    One budget per group could not do that, since each would allow one of its own pods."""
    selector = (
        group_selector(owner, plan)
        if plan.pipeline_parallel_size > 1
        else {"matchLabels": selector_labels(owner)}
    )
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, owner.name),
        "spec": {"maxUnavailable": 1, "selector": selector},
    }
