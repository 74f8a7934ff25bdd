"""The HorizontalPodAutoscaler on vLLM's queue depth, and the PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.names import Owner, engine_deployment_name, metadata, selector_labels

# The custom metric prometheus-adapter serves from vLLM's `vllm:num_requests_waiting` gauge.
QUEUE_METRIC = "vllm_num_requests_waiting"
SCALE_UP_PERIOD_SECONDS = 15


def render_hpa(owner: Owner, spec: LLMDeploymentSpec, plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(owner, owner.name),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": engine_deployment_name(owner.name, plan),
            },
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
            "behavior": {
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
            },
        },
    }


def render_pdb(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner, owner.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(owner)}},
    }
