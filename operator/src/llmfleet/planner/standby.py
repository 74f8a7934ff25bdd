"""What standby engines (spec.autoscaling.standby) cost, and the layouts they are refused at."""

from __future__ import annotations

from llmfleet.models.standby import StandbyPlan, StandbySpec
from llmfleet.planner.errors import PlanError

STANDBY_FIELD = "spec.autoscaling.standby.replicas"
# Sleep was reported to hang at tensor parallel > 1. It was measured reliable at TP 1 and TP 2
# (bench/gpu/h200x2-2026-11-28-sleep-tp2.jsonl: five rounds of five) and is unmeasured above or
# at pipeline parallel > 1; a refusal with this reason beats shipping an engine that never wakes.
STANDBY_UNMEASURED_PARALLELISM = "StandbyUnmeasuredParallelism"
STANDBY_MAX_TENSOR_PARALLEL = 2
STANDBY_THRESHOLDS = "StandbyThresholds"


def plan_standby(
    standby: StandbySpec | None,
    *,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    gpus_per_replica: int,
    weights_gib: float,
    target_queue_depth: int,
) -> StandbyPlan | None:
    """The standby plan, None without standby replicas; PlanError where they cannot run."""
    if standby is None or standby.replicas == 0:
        return None
    if tensor_parallel_size > STANDBY_MAX_TENSOR_PARALLEL or pipeline_parallel_size > 1:
        raise PlanError(
            STANDBY_FIELD,
            f"standby engines need tensor parallel {STANDBY_MAX_TENSOR_PARALLEL} or less and "
            f"pipeline parallel 1; the plan has tensor parallel {tensor_parallel_size} and "
            f"pipeline parallel {pipeline_parallel_size}. vLLM's sleep mode is measured "
            "reliable at TP 1 and 2 only and was reported to hang above; set "
            "standby.replicas to 0, or give each engine at most two GPUs of one node",
            reason=STANDBY_UNMEASURED_PARALLELISM,
        )
    sleep_depth = (
        target_queue_depth // 2 if standby.sleep_queue_depth is None else standby.sleep_queue_depth
    )
    if sleep_depth >= target_queue_depth:
        raise PlanError(
            "spec.autoscaling.standby.sleepQueueDepth",
            f"{sleep_depth} must be below the autoscaler's targetQueueDepth "
            f"{target_queue_depth}, which wakes a standby engine; lower it",
            reason=STANDBY_THRESHOLDS,
        )
    return StandbyPlan(
        replicas=standby.replicas,
        gpus=standby.replicas * gpus_per_replica,
        host_memory_gib_per_replica=round(weights_gib, 2),
        wake_queue_depth=target_queue_depth,
        sleep_queue_depth=sleep_depth,
        cooldown_seconds=standby.cooldown_seconds,
    )
