"""The custom resources LLMFleet serves, each described for the CRD generator."""

from __future__ import annotations

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.crd import AGE_COLUMN, CrdDefinition, PrinterColumn, ResourceNames
from llmfleet.models.deployment import (
    CATEGORIES,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    LLMDeploymentSpec,
)
from llmfleet.models.status import LLMDeploymentStatus

LLMDEPLOYMENT = CrdDefinition(
    group=API_GROUP,
    version=API_VERSION,
    names=ResourceNames(
        kind=KIND,
        plural=PLURAL,
        singular=SINGULAR,
        short_names=SHORT_NAMES,
        categories=CATEGORIES,
    ),
    description=(
        "LLMDeployment serves one model with a fleet of vLLM servers, laid out on the given "
        "GPUs by the LLMFleet planner and autoscaled on queue depth."
    ),
    spec_model=LLMDeploymentSpec,
    status_model=LLMDeploymentStatus,
    printer_columns=(
        PrinterColumn("Strategy", "string", ".status.plan.strategy", "Planned layout."),
        PrinterColumn("Replicas", "integer", ".status.replicas", "Desired pods."),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Pods ready to serve."),
        PrinterColumn("GPUs", "integer", ".status.gpus", "GPUs requested by desired pods."),
        AGE_COLUMN,
    ),
)

ALL_RESOURCES: tuple[CrdDefinition, ...] = (LLMDEPLOYMENT,)
