"""The custom resources LLMFleet serves, each described for the CRD generator."""

from __future__ import annotations

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models import batchjob, batchjob_status
from llmfleet.models.crd import AGE_COLUMN, CrdDefinition, PrinterColumn, ResourceNames
from llmfleet.models.deployment import (
    CATEGORIES,
    KIND,
    NAME_RULE,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    LLMDeploymentSpec,
)
from llmfleet.models.status import LLMDeploymentStatus

_AVAILABLE = '.status.conditions[?(@.type=="Available")]'

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
    object_rules=(NAME_RULE,),
    printer_columns=(
        PrinterColumn("Strategy", "string", ".status.plan.strategy", "Planned layout."),
        PrinterColumn("Replicas", "integer", ".status.replicas", "Desired pods."),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Pods ready to serve."),
        PrinterColumn("GPUs", "integer", ".status.gpus", "GPUs requested by desired pods."),
        PrinterColumn("Available", "string", _AVAILABLE + ".status", "Whether a vLLM pod serves."),
        PrinterColumn(
            "Reason",
            "string",
            _AVAILABLE + ".reason",
            "Why it is (not) available, e.g. TokenSecretNotFound, GPUProductNotFound.",
        ),
        AGE_COLUMN,
        PrinterColumn(
            "Message",
            "string",
            _AVAILABLE + ".message",
            "The Available condition's message: the spec field and what Kubernetes said.",
            priority=1,
        ),
    ),
)

LLMBATCHJOB = CrdDefinition(
    group=API_GROUP,
    version=API_VERSION,
    names=ResourceNames(
        kind=batchjob.KIND,
        plural=batchjob.PLURAL,
        singular=batchjob.SINGULAR,
        short_names=batchjob.SHORT_NAMES,
        categories=batchjob.CATEGORIES,
    ),
    description=(
        "LLMBatchJob runs offline batch inference of a JSONL file of OpenAI Batch API requests "
        "with vLLM's offline engine, sharded over pods of an Indexed Job, resumable after a "
        "restart, answering every line exactly once."
    ),
    spec_model=batchjob.LLMBatchJobSpec,
    status_model=batchjob_status.LLMBatchJobStatus,
    object_rules=(batchjob.NAME_RULE,),
    printer_columns=(
        PrinterColumn(
            "Status", "string", ".status.phase", "Pending, Running, Preempted, Complete, Failed."
        ),
        PrinterColumn("Shards", "integer", ".status.shards", "Shares of the lines."),
        PrinterColumn("Running", "integer", ".status.runningShards", "Shards running now."),
        PrinterColumn("Progress", "string", ".status.progress", "Lines done of total."),
        PrinterColumn("Failed", "integer", ".status.failed", "Lines with an error record."),
        PrinterColumn("Tok/s", "number", ".status.tokensPerSecond", "Generated tokens/s."),
        PrinterColumn("ETA", "string", ".status.eta", "Estimated time left."),
        AGE_COLUMN,
        PrinterColumn(
            "Reason",
            "string",
            '.status.conditions[?(@.type=="Running")].reason',
            "Why shards (do not) run, e.g. InputConfigMapNotFound, OutputClaimNotFound.",
            priority=1,
        ),
        PrinterColumn("Priority", "string", ".spec.priority", "Normal or Spare.", priority=1),
        PrinterColumn(
            "Preemptions", "integer", ".status.preemptions", "Shard pods preempted.", priority=1
        ),
    ),
)

ALL_RESOURCES: tuple[CrdDefinition, ...] = (LLMDEPLOYMENT, LLMBATCHJOB)
