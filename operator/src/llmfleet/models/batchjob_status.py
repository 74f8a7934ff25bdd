"""An LLMBatchJob's status: its progress, conditions and per-shard figures, as the operator
observes them (reconcile/llmbatchjob/batchstatus.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from llmfleet.models.base import ApiModel
from llmfleet.models.status import Condition, PlanSummary


def _count(description: str) -> Any:
    """A counter of status: an int from 0."""
    return Field(default=0, ge=0, description=description)


ShardPhase = Literal["Pending", "Running", "Preempted", "Succeeded", "Failed"]
JobPhase = Literal["Pending", "Running", "Preempted", "Complete", "Failed"]


class ShardStatus(ApiModel):
    """Progress of one shard."""

    index: int = Field(ge=0, description="Shard index (the Job's completion index).")
    phase: ShardPhase = Field(
        description=(
            "Pending, Running, Preempted (its pod was preempted; the shard resumes when a GPU "
            "frees), Succeeded or Failed."
        )
    )
    total: int | None = Field(default=None, ge=0, description="Lines of this shard.")
    succeeded: int = Field(default=0, ge=0, description="Lines answered.")
    failed: int = Field(default=0, ge=0, description="Lines with an error record.")
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="Generated tokens per second of the running pod."
    )
    restarts: int = _count(
        "Pods of this shard that failed, counted against maxRestartsPerShard (a preempted or "
        "evicted pod is not)."
    )
    preemptions: int = _count("Pods of this shard the scheduler preempted.")
    preempted_by: str | None = Field(
        default=None,
        description=(
            "While the shard is Preempted: who preempted its pod (pod NAMESPACE/NAME on node "
            "NODE, or the scheduler's words). Kept here because Kubernetes deletes a preempted "
            "pod once it has stopped, while its replacement still waits for a GPU."
        ),
    )
    lines_redone: int = _count(
        "Lines run again because the pod running them stopped before writing them (a crash, or "
        "a stop whose grace period ended first): work done twice, never a line answered twice."
    )


class LLMBatchJobStatus(ApiModel):
    """Observed state of an LLMBatchJob."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation of the reconciled spec."
    )
    conditions: tuple[Condition, ...] = Field(
        default=(),
        description="Current conditions (Running, Preempted, Complete, Failed), one per type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    phase: JobPhase | None = Field(
        default=None,
        description=(
            "Pending, Running, Preempted (shards wait for GPUs the scheduler gave to "
            "higher-priority pods), Complete or Failed."
        ),
    )
    plan: PlanSummary | None = Field(default=None, description="The planned layout per shard.")
    job_name: str | None = Field(default=None, description="The Kubernetes Job running shards.")
    shards: int | None = Field(default=None, ge=1, description="Shards (Job completions).")
    running_shards: int = _count(
        "Shards running now, each on one pod: with spec.parallelism below shards, or a Spare "
        "job on fewer free GPUs than it may use, fewer than shards."
    )
    total: int | None = Field(
        default=None, ge=0, description="Lines in the input (known once a shard has started)."
    )
    succeeded: int = Field(default=0, ge=0, description="Lines answered, over all shards.")
    failed: int = Field(default=0, ge=0, description="Lines with an error record.")
    progress: str | None = Field(
        default=None,
        description=(
            "Lines done (succeeded + failed) of total, e.g. 150/300 (50%); ~ before an estimated "
            "total while some shards have not started (spec.parallelism below shards)."
        ),
    )
    prompt_tokens: int = Field(default=0, ge=0, description="Prompt tokens processed.")
    completion_tokens: int = Field(default=0, ge=0, description="Tokens generated.")
    gpu_seconds: int = _count(
        "GPU-seconds held by the job's shard pods, each from its start to its end (whether or "
        "not it finished its lines)."
    )
    gpu_seconds_at: datetime | None = Field(
        default=None,
        description=(
            "When gpuSeconds was last brought up to date: the next count adds what the shard "
            "pods held after it, so the seconds of pods Kubernetes has since deleted (a "
            "preempted pod goes once it stopped) stay counted."
        ),
    )
    preemptions: int = _count("Shard pods the scheduler preempted, over all shards.")
    lines_redone: int = _count(
        "Lines run again after the pod running them stopped before writing them, over all "
        "shards (work done twice; every line is still answered once)."
    )
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="Generated tokens per second over the running shards."
    )
    eta: str | None = Field(
        default=None, description="Estimated time left at the current rate, e.g. 12m30s."
    )
    start_time: datetime | None = Field(default=None, description="When the Job started.")
    completion_time: datetime | None = Field(
        default=None, description="When the Job completed or failed."
    )
    shard_status: tuple[ShardStatus, ...] = Field(default=(), description="Per-shard progress.")
