"""Names and labels of everything rendered for one LLMDeployment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.deployment import KIND
from llmfleet.planner import Plan

MANAGED_BY = "llmfleet"
ENGINE_CONTAINER = "vllm"  # the engine pod's one container
DEPLOYMENT_LABEL = "llmfleet.dev/deployment"
LAYOUT_LABEL = "llmfleet.dev/layout"
COMPONENT_ENGINE = "engine"
HTTP_PORT = 8000
# Layout ids (layout_id) and, matching every one of them, a regular expression: the dashboards
# select an LLMDeployment's engine Deployments of every layout with ENGINE_NAME_SUFFIX_PATTERN.
CPU_LAYOUT = "cpu"
TP_LAYOUT_PREFIX = "tp"
ENGINE_NAME_SUFFIX_PATTERN = f"-({TP_LAYOUT_PREFIX}[0-9]+|{CPU_LAYOUT})"


@dataclass(frozen=True)
class Owner:
    """The LLMDeployment the children belong to."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def layout_id(plan: Plan) -> str:
    """Short id of a layout; a layout change renders a new engine Deployment beside the old."""
    if plan.gpus_per_replica == 0:
        return CPU_LAYOUT
    tp = f"{TP_LAYOUT_PREFIX}{plan.tensor_parallel_size}"
    return tp if plan.pipeline_parallel_size == 1 else f"{tp}-pp{plan.pipeline_parallel_size}"


def engine_deployment_name(owner_name: str, plan: Plan) -> str:
    return f"{owner_name}-{layout_id(plan)}"


def selector_labels(owner: Owner, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    """Labels every engine pod of this LLMDeployment has, whatever its layout."""
    return {
        DEPLOYMENT_LABEL: owner.name,
        "app.kubernetes.io/component": component,
    }


def common_labels(owner: Owner, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(owner, component),
    }


def metadata(owner: Owner, name: str, component: str = COMPONENT_ENGINE) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": common_labels(owner, component),
        "ownerReferences": [owner.reference()],
    }
