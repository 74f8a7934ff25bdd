"""`spec.autoscaling.standby`: engines started and then put to sleep (vLLM sleep mode, level 1),
woken on a queue surge before the autoscaler's new pod could be ready (docs/autoscaling.md,
"Standby engines")."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule

MAX_STANDBY_REPLICAS = 100
DEFAULT_STANDBY_COOLDOWN_SECONDS = 120
MIN_STANDBY_COOLDOWN_SECONDS = 10
MAX_STANDBY_COOLDOWN_SECONDS = 3_600


class StandbySpec(ApiModel):
    """Sleeping engines the operator wakes when the queue passes the autoscaler's target."""

    cel_rules = (
        CelRule(
            rule="!has(self.sleepQueueDepth) || self.replicas > 0",
            message="sleepQueueDepth applies only to standby engines: set replicas above 0",
            holds=lambda s: s.sleep_queue_depth is None or s.replicas > 0,
            field="sleepQueueDepth",
        ),
    )

    replicas: int = Field(
        default=0,
        ge=0,
        le=MAX_STANDBY_REPLICAS,
        description=(
            "Engine pods started beside the autoscaled ones, in a Deployment <name>-standby "
            "running vLLM in sleep mode, and put to sleep once ready "
            "(weights offloaded to host memory, KV cache freed). Each holds its GPUs while "
            "asleep and host memory for the model's weights; status.plan.standby and `llmfleet "
            "plan` show both, status.standby how many are asleep and awake. A sleeping engine "
            "takes no requests (its readiness gate llmfleet.dev/standby-awake is False); the "
            "operator wakes one when the queue per engine in rotation passes the autoscaler's "
            "targetQueueDepth, in about a second instead of a new pod's minutes (Event "
            "StandbyWoken), and puts one back to sleep after sleepQueueDepth held for "
            "cooldownSeconds (StandbySlept). vLLM's dev-mode endpoints that sleep mode opens "
            "answer only the operator (docs/security.md). Refused (Planned=False, reason "
            f"StandbyUnmeasuredParallelism) at tensor parallel above 2 or pipeline parallel "
            f"above 1 (sleep measured only at TP 1 and 2). 0 to "
            f"{MAX_STANDBY_REPLICAS}, default 0."
        ),
    )
    sleep_queue_depth: int | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description=(
            "Requests waiting per pod at or below which an awake standby engine is put back "
            "to sleep, once the queue has stayed there cooldownSeconds. Must be below the "
            "autoscaler's targetQueueDepth (Planned=False otherwise). Default: half the "
            "target, rounded down."
        ),
    )
    cooldown_seconds: int = Field(
        default=DEFAULT_STANDBY_COOLDOWN_SECONDS,
        ge=MIN_STANDBY_COOLDOWN_SECONDS,
        le=MAX_STANDBY_COOLDOWN_SECONDS,
        description=(
            "Seconds the queue must stay at or below sleepQueueDepth before an awake standby "
            "engine sleeps again; sleeping a large model takes up to a minute, so this avoids "
            f"flapping. {MIN_STANDBY_COOLDOWN_SECONDS} to {MAX_STANDBY_COOLDOWN_SECONDS}, "
            f"default {DEFAULT_STANDBY_COOLDOWN_SECONDS}."
        ),
    )


class StandbyPlan(ApiModel):
    """The standby engines and what they hold while asleep."""

    replicas: int = Field(ge=1, description="Standby engine pods, each asleep until woken.")
    gpus: int = Field(
        ge=0, description="GPUs the standby pods hold, asleep or awake (replicas x gpusPerReplica)."
    )
    host_memory_gib_per_replica: float = Field(
        alias="hostMemoryGiBPerReplica",
        ge=0,
        description="Host memory one sleeping engine holds for its offloaded weights, GiB.",
    )
    wake_queue_depth: int = Field(
        ge=1, description="Requests waiting per pod above which one standby engine is woken."
    )
    sleep_queue_depth: int = Field(
        ge=0, description="Requests waiting per pod at or below which a woken one sleeps again."
    )
    cooldown_seconds: int = Field(
        ge=1, description="How long the queue stays at or below sleepQueueDepth before that."
    )


class StandbyStatus(ApiModel):
    """How many standby engines are asleep and awake now."""

    asleep: int = Field(ge=0, description="Standby engines asleep, out of rotation.")
    awake: int = Field(ge=0, description="Standby engines woken for the queue, in rotation.")
