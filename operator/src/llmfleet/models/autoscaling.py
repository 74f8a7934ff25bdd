"""`spec.autoscaling`: queue-depth driven HorizontalPodAutoscaler bounds."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.defaults import DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS


class AutoscalingSpec(ApiModel):
    """Scale the planned pods on vLLM's queue depth. Each added pod has the planned GPU count."""

    cel_rules = (
        CelRule(
            rule=(
                "!has(self.minReplicas) || !has(self.maxReplicas) || "
                "self.maxReplicas >= self.minReplicas"
            ),
            message="maxReplicas must be greater than or equal to minReplicas",
            holds=lambda a: (
                a.min_replicas is None or a.max_replicas is None or a.max_replicas >= a.min_replicas
            ),
            field="maxReplicas",
        ),
    )

    enabled: bool = Field(
        default=True,
        description=(
            "Create a HorizontalPodAutoscaler. When false the planned replica count is "
            "fixed. Default true."
        ),
    )
    min_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1_000,
        description="Fewest pods. Default: the planned replica count.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1_000,
        description="Most pods. Default: twice minReplicas.",
    )
    target_queue_depth: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description=(
            "Requests waiting per pod (vllm:num_requests_waiting, averaged over pods) above "
            "which the autoscaler adds pods. Default: a quarter of the planned concurrency per "
            "pod (ceil(maxNumSeqs / 4), at least 1), so a request that queues at the target "
            "waits about a quarter of one request's time (each finishing sequence admits one)."
        ),
    )
    scale_down_stabilization_seconds: int = Field(
        default=DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
        ge=0,
        le=3_600,
        description=(
            "Seconds the queue must stay low before pods are removed; model servers are "
            "slow to start, so this avoids flapping. 0 to 3600, default "
            f"{DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS}."
        ),
    )
