"""`LLMDeployment.status`, written by the operator; its schema is generated from these models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from llmfleet.models.base import ApiModel
from llmfleet.models.standby import StandbyPlan, StandbyStatus
from llmfleet.models.startup import StartupPrediction

ConditionStatus = Literal["True", "False", "Unknown"]
PlannedStrategy = Literal["SinglePod", "MultiPod", "MultiNode"]


class Condition(ApiModel):
    """The state of one aspect of the deployment, in the standard Kubernetes condition shape."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description="Condition type, e.g. Planned, Available, Progressing.",
    )
    status: ConditionStatus = Field(description="One of True, False, Unknown.")
    reason: str = Field(
        default="",
        max_length=1_024,
        description="CamelCase reason for the last transition, for machines.",
    )
    message: str = Field(
        default="",
        max_length=32_768,
        description="Explanation of the last transition, for humans.",
    )
    last_transition_time: datetime | None = Field(
        default=None, description="When status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="metadata.generation of the spec this condition was computed from.",
    )


class PlanSummary(ApiModel):
    """The layout the operator deployed, as chosen by the planner."""

    strategy: PlannedStrategy = Field(
        description="Chosen layout: SinglePod, MultiPod or MultiNode."
    )
    replicas: int = Field(
        ge=0, description="Replicas in the planned layout (pods, or MultiNode groups)."
    )
    gpus_per_replica: int = Field(
        ge=0, description="GPUs per replica, across its nodes (0 for CPU-only serving)."
    )
    tensor_parallel_size: int = Field(ge=1, description="vLLM --tensor-parallel-size per pod.")
    pipeline_parallel_size: int | None = Field(
        default=None,
        ge=2,
        description="MultiNode only: vLLM --pipeline-parallel-size, one stage per node.",
    )
    kv_cache_tokens_per_replica: int = Field(
        ge=0,
        description=(
            "Tokens of KV cache one pod holds, estimated by the planner for an engine that "
            "compiles afresh (the first pod); sequences are planned by it."
        ),
    )
    kv_cache_tokens_compile_cached: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Tokens of KV cache one pod holds when its engine loads an earlier start's "
            "torch.compile cache (spec.engine.compileCache: every pod after the first). "
            "Higher for w8a8 weights (fp8, int8), whose compiled forward peaks lower; "
            "PlanVerified accepts either figure. Absent on CPU."
        ),
    )
    max_concurrent_sequences: int = Field(
        ge=0, description="Sequences one pod runs at once (vLLM --max-num-seqs)."
    )
    standby: StandbyPlan | None = Field(
        default=None,
        description=(
            "spec.autoscaling.standby: the sleeping engines, the GPUs they hold and the host "
            "memory each holds for its weights; absent without standby replicas."
        ),
    )
    startup: StartupPrediction | None = Field(
        default=None,
        description=(
            "One engine pod's predicted start per phase, cold and with a warm compile cache, "
            "and the startupProbe budget it gives; GPU plans only."
        ),
    )


class Prediction(ApiModel):
    """The planner's prediction of one pod's speed for spec.workload, from its performance model
    (bandwidth, FLOPs and interconnect of the GPU, with efficiencies calibrated on real vLLM)."""

    prompt_tokens: int = Field(ge=1, description="Workload prompt length the prediction is for.")
    output_tokens: int = Field(ge=1, description="Workload output length the prediction is for.")
    concurrency: int = Field(
        ge=1, description="Sequences per pod the prediction assumes (vLLM --max-num-seqs)."
    )
    output_tokens_per_second: float = Field(
        ge=0, description="Generated tokens/s of one pod at that concurrency (saturated)."
    )
    total_tokens_per_second: float = Field(
        ge=0, description="Prompt plus generated tokens/s of one pod, saturated."
    )
    output_tokens_per_second_per_gpu: float = Field(
        alias="outputTokensPerSecondPerGPU", ge=0, description="outputTokensPerSecond / GPUs."
    )
    ttft_millis: float = Field(
        ge=0, description="Time to first token for one prompt of promptTokens on an idle pod."
    )
    itl_millis: float = Field(
        ge=0, description="Inter-token latency at the planned concurrency, milliseconds."
    )
    itl_millis_batch1: float = Field(
        alias="itlMillisBatch1", ge=0, description="Inter-token latency of a lone request."
    )
    max_concurrency_within_slo: int | None = Field(
        default=None,
        ge=0,
        description="Most sequences per pod whose ITL meets spec.slo.itlMillis (with an SLO).",
    )
    calibration: str = Field(description="Which measurements calibrated the model.")
    sampling: str | None = Field(
        default=None,
        description=(
            "Which sampling and engine state the figures stand for (greedy, warm), with the "
            "measured cost of top-p sampling and of a cold engine."
        ),
    )


class Measured(ApiModel):
    """What the running engines report, to check the plan against."""

    kv_cache_tokens: int | None = Field(
        default=None,
        ge=0,
        description="KV-cache tokens one engine allocated (vllm:cache_config_info, smallest pod).",
    )


class AdapterStatus(ApiModel):
    """One LoRA adapter of spec.adapters, as the engines hold it."""

    name: str = Field(description="The adapter's name (spec.adapters[].name).")
    engines: int = Field(ge=0, description="Engines that serve it now.")
    of: int = Field(ge=0, description="Engines with LoRA that answer the operator.")
    error: str | None = Field(
        default=None,
        description="Why an engine could not load it (vLLM's words), while it cannot.",
    )


class LLMDeploymentStatus(ApiModel):
    """Observed state of an LLMDeployment."""

    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="metadata.generation of the most recently reconciled spec.",
    )
    conditions: tuple[Condition, ...] = Field(
        default=(),
        description=(
            "Current conditions, one per type: Planned, Available, Progressing, "
            "ScalingLimited, Degraded, PlanVerified; ScaledToZero with minReplicas 0; "
            "AdaptersReady with LoRA."
        ),
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    plan: PlanSummary | None = Field(
        default=None, description="The planned layout; absent while the spec cannot be planned."
    )
    predicted: Prediction | None = Field(
        default=None,
        description=(
            "Predicted speed of one pod of the plan for spec.workload; absent when the GPU "
            "has no performance constants (spec.gpus.profile) or for CPU-only serving."
        ),
    )
    measured: Measured | None = Field(
        default=None, description="What the ready engines report (PlanVerified compares)."
    )
    replicas: int | None = Field(
        default=None, ge=0, description="Desired pods (the autoscaler may change it)."
    )
    current_replicas: int | None = Field(
        default=None, ge=0, description="Pods that exist, ready or not."
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Pods whose vLLM server passes its readiness probe."
    )
    endpoint: str | None = Field(
        default=None,
        description=(
            "In-cluster base URL of the OpenAI-compatible API: the router's Service when "
            "there is a router (http://name-router.ns.svc:8000/v1), else the engine Service "
            "(http://name.ns.svc:8000/v1)."
        ),
    )
    gpus: int | None = Field(
        default=None, ge=0, description="GPUs requested by the desired pods, in total."
    )
    compile_cache: str | None = Field(
        default=None,
        description=(
            "Where the engines keep vLLM's compile cache (spec.engine.compileCache): on the "
            "model cache claim, in the pod, or off."
        ),
    )
    adapters: tuple[AdapterStatus, ...] | None = Field(
        default=None,
        description=(
            "Per LoRA adapter of spec.adapters, how many engines serve it and why any could "
            "not load it (condition AdaptersReady sums it up); absent without LoRA."
        ),
    )
    standby: StandbyStatus | None = Field(
        default=None,
        description=(
            "spec.autoscaling.standby: the standby engines that answer, asleep and awake; "
            "absent without standby replicas."
        ),
    )


def status_json(status: BaseModel) -> dict[str, Any]:
    """A status as the operator writes it: camelCase; the fields that were set, so one carried
    over from the API server keeps exactly the members it had; none at the top level without a
    value (below it, an unset value is written as null, as the API server's schema allows)."""
    written = status.model_dump(by_alias=True, mode="json", exclude_unset=True)
    return {k: v for k, v in written.items() if v is not None}
