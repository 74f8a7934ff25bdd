"""`spec.autoscaling`: queue-depth driven HorizontalPodAutoscaler bounds, and scale to zero."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.defaults import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS,
    DEFAULT_WAKE_TIMEOUT_SECONDS,
)
from llmfleet.models.standby import StandbySpec


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
        CelRule(
            rule=(
                "(!has(self.idleSeconds) && !has(self.wakeTimeoutSeconds)) || "
                "(has(self.minReplicas) && self.minReplicas == 0)"
            ),
            message=(
                "idleSeconds and wakeTimeoutSeconds apply only to scale to zero: set "
                "minReplicas to 0, or remove them"
            ),
            holds=lambda a: (
                (a.idle_seconds is None and a.wake_timeout_seconds is None) or a.min_replicas == 0
            ),
            field="minReplicas",
        ),
        CelRule(
            rule="!has(self.minReplicas) || self.minReplicas > 0 || self.enabled",
            message=(
                "minReplicas 0 (scale to zero) needs the autoscaler: set enabled to true, or "
                "minReplicas to at least 1"
            ),
            holds=lambda a: a.min_replicas is None or a.min_replicas > 0 or a.enabled,
            field="minReplicas",
        ),
        CelRule(
            rule="!has(self.standby) || !has(self.standby.replicas) || "
            "self.standby.replicas == 0 || self.enabled",
            message=(
                "standby.replicas needs the autoscaler, whose queue signal wakes them: set "
                "enabled to true, or standby.replicas to 0"
            ),
            holds=lambda a: a.standby_replicas == 0 or a.enabled,
            field="standby.replicas",
        ),
        CelRule(
            rule="!has(self.standby) || !has(self.standby.replicas) || "
            "self.standby.replicas == 0 || !has(self.minReplicas) || self.minReplicas > 0",
            message=(
                "standby.replicas cannot go with minReplicas 0: standby engines keep their GPUs "
                "while idle, which scale to zero exists to free; set minReplicas to at least 1, "
                "or standby.replicas to 0"
            ),
            holds=lambda a: a.standby_replicas == 0 or a.min_replicas != 0,
            field="standby.replicas",
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
        ge=0,
        le=1_000,
        description=(
            "Fewest pods. 0 scales an idle LLMDeployment to zero pods (and GPUs) after "
            "idleSeconds without a request and back up on the next request, which the router "
            "holds meanwhile; this needs KEDA (keda.sh) in the cluster. Default: the planned "
            "replica count."
        ),
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=1_000,
        description=(
            "Most pods. Default: twice minReplicas (twice the planned replica count when "
            "minReplicas is 0)."
        ),
    )
    idle_seconds: int | None = Field(
        default=None,
        ge=30,
        le=86_400,
        description=(
            "With minReplicas 0: seconds without a request (none arriving, running or "
            "waiting) after which the last pod is removed (KEDA's cooldownPeriod). 30 to "
            f"86400, default {DEFAULT_IDLE_SECONDS}."
        ),
    )
    wake_timeout_seconds: int | None = Field(
        default=None,
        ge=30,
        le=3_600,
        description=(
            "With minReplicas 0: how long the router holds a request that arrives while no "
            "engine is ready (at zero, the time a pod takes to start and load the model) "
            "before it answers 503. 30 to 3600, default "
            f"{DEFAULT_WAKE_TIMEOUT_SECONDS}."
        ),
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
    standby: StandbySpec | None = Field(
        default=None,
        description=(
            "Standby engines: started, then put to sleep, and woken on a queue surge before "
            'the autoscaler\'s new pod could be ready (docs/autoscaling.md, "Standby engines").'
        ),
    )

    @property
    def standby_replicas(self) -> int:
        return 0 if self.standby is None else self.standby.replicas

    @property
    def scales_to_zero(self) -> bool:
        return self.enabled and self.min_replicas == 0

    @property
    def idle_window_seconds(self) -> int:
        return DEFAULT_IDLE_SECONDS if self.idle_seconds is None else self.idle_seconds

    @property
    def wake_timeout(self) -> int:
        return (
            DEFAULT_WAKE_TIMEOUT_SECONDS
            if self.wake_timeout_seconds is None
            else self.wake_timeout_seconds
        )
