"""Names and labels of everything rendered for one LLMDeployment."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, ClassVar

from llmfleet import API_GROUP, API_VERSION, __version__
from llmfleet.models.deployment import KIND
from llmfleet.planner import Plan

MANAGED_BY = "llmfleet"
ENGINE_CONTAINER = "vllm"  # the engine pod's one container
# LoRA: the engine pods' readiness gate, True once the operator loaded the adapters (docs/lora.md).
ADAPTERS_GATE = "llmfleet.dev/adapters-loaded"
# LoRA: the engine pods' condition (not a readiness gate) naming the adapters loaded in the engine
# (reconcile/llmdeployment/adapter_marks.py).
ADAPTERS_MARK = "llmfleet.dev/adapters-serving"
# Stall detection: the engine pods' readiness gate, False while the operator sees the engine's
# requests running and no token counted (docs/operator.md, "Stalled engines").
PROGRESS_GATE = "llmfleet.dev/engine-progressing"
DEPLOYMENT_LABEL = "llmfleet.dev/deployment"
LAYOUT_LABEL = "llmfleet.dev/layout"
COMPONENT_LABEL = "app.kubernetes.io/component"
VERSION_LABEL = "app.kubernetes.io/version"
COMPONENT_ENGINE = "engine"
# A multi-node replica's pods other than its leader: they run the model's other pipeline stages
# and serve nothing, so the engine Service, the router, the HPA's metric and the PodMonitor (all
# of which select COMPONENT_ENGINE) never see them.
COMPONENT_ENGINE_WORKER = "engine-worker"
HTTP_PORT = 8000
# Layout ids (layout_id) and, matching every one of them, a regular expression: the dashboards
# select an LLMDeployment's engine Deployments of every layout with ENGINE_NAME_SUFFIX_PATTERN.
CPU_LAYOUT = "cpu"
TP_LAYOUT_PREFIX = "tp"
ENGINE_NAME_SUFFIX_PATTERN = f"-({TP_LAYOUT_PREFIX}[0-9]+|{CPU_LAYOUT})"


@dataclass(frozen=True)
class OwnerRef:
    """An llmfleet object that controls the children rendered for it; `kind` is its kind."""

    kind: ClassVar[str]
    name: str
    namespace: str
    uid: str

    def reference(self) -> dict[str, Any]:
        """The children's ownerReference: deleting the owner deletes them, and no other
        controller may claim them."""
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True)
class Owner(OwnerRef):
    """The LLMDeployment the children belong to."""

    kind: ClassVar[str] = KIND


def layout_id(plan: Plan) -> str:
    """Short id of a layout; a layout change renders a new engine Deployment beside the old."""
    if plan.gpus_per_replica == 0:
        return CPU_LAYOUT
    tp = f"{TP_LAYOUT_PREFIX}{plan.tensor_parallel_size}"
    return tp if plan.pipeline_parallel_size == 1 else f"{tp}-pp{plan.pipeline_parallel_size}"


# A LeaderWorkerSet's name starts the names of its StatefulSets (`<name>` for the leaders,
# `<name>-<group>` for each group's workers), whose pods carry `<statefulset>-<10-char hash>` as
# the controller-revision-hash label (at most 63): so at most 52 - len("-999") characters.
MAX_GROUPED_NAME = 48


def engine_deployment_name(owner_name: str, plan: Plan) -> str:
    """The engine Deployment's name (or, for a multi-node layout, the LeaderWorkerSet's)."""
    suffix = f"-{layout_id(plan)}"
    name = f"{owner_name}{suffix}"
    if plan.pipeline_parallel_size > 1 and len(name) > MAX_GROUPED_NAME:
        digest = hashlib.sha256(owner_name.encode()).hexdigest()[:5]
        keep = MAX_GROUPED_NAME - len(suffix) - len(digest) - 1
        name = f"{owner_name[:keep].rstrip('-')}-{digest}{suffix}"
    return name


def selector_labels(owner: Owner, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    """Labels every engine pod of this LLMDeployment has, whatever its layout."""
    return {
        DEPLOYMENT_LABEL: owner.name,
        COMPONENT_LABEL: component,
    }


def group_selector(owner: Owner, plan: Plan) -> dict[str, Any]:
    """Every pod of this layout, a multi-node replica's leaders and workers alike (the router
    carries no layout label)."""
    return {"matchLabels": {DEPLOYMENT_LABEL: owner.name, LAYOUT_LABEL: layout_id(plan)}}


def pod_template_labels(owner: Owner, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    """Labels of a pod template. Never the release's version: a changed template rolls every
    pod, and an operator upgrade must not restart engines (tests/unit/test_upgrade_pod_templates.py
    compares the templates with the previous release's)."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(owner, component),
    }


def object_labels(owner: Owner, component: str = COMPONENT_ENGINE) -> dict[str, str]:
    """Labels of a rendered object's own metadata, where a change rolls no pod: the pod
    template's, plus the operator release that rendered it."""
    return {**pod_template_labels(owner, component), VERSION_LABEL: __version__}


def metadata(owner: Owner, name: str, component: str = COMPONENT_ENGINE) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": object_labels(owner, component),
        "ownerReferences": [owner.reference()],
    }
