"""PlanVerified: the KV cache the engines allocated against the plan's figure, and when its
turning False deserves a Warning Event."""

from __future__ import annotations

from llmfleet.models.status import Condition, LLMDeploymentStatus
from llmfleet.reconcile.machinery.conditions import FALSE, TRUE, UNKNOWN, condition, find

from . import reasons as r

# How far the KV cache an engine allocated may be from the planner's figure for PlanVerified.
KV_TOLERANCE = 0.10


def _deviation(measured: int, planned: int) -> float:
    if planned:
        return (measured - planned) / planned
    return 0.0 if measured == 0 else 1.0


def plan_verified(
    measured: int | None, planned: int, generation: int, compile_cached: int | None = None
) -> Condition:
    """PlanVerified: does the smallest KV cache a ready engine allocated match, within
    KV_TOLERANCE, the plan's kvCacheTokensPerReplica (an engine that compiled afresh) or its
    kvCacheTokensCompileCached (one that loaded its compile cache)? The message names the
    figure it is nearer. Unknown until an engine has reported."""
    if measured is None:
        return condition(
            r.PLAN_VERIFIED,
            UNKNOWN,
            r.NO_ENGINE_REPORTED,
            "no ready engine of the current layout has reported its KV cache yet "
            "(vllm:cache_config_info)",
            generation,
        )
    figures = [(planned, "per pod compiling afresh")]
    if compile_cached is not None and compile_cached != planned:
        figures.append((compile_cached, "per pod that loads its compile cache"))
    else:
        figures = [(planned, "per pod")]
    figure, words = min(figures, key=lambda f: abs(_deviation(measured, f[0])))
    deviation = _deviation(measured, figure)
    numbers = (
        f"engines allocated {measured:,} KV-cache tokens (the smallest pod), "
        f"the plan {figure:,} {words}: {deviation:+.1%}"
    )
    if abs(deviation) <= KV_TOLERANCE:
        return condition(
            r.PLAN_VERIFIED,
            TRUE,
            r.KV_CACHE_MATCHES_PLAN,
            f"{numbers}, within {KV_TOLERANCE:.0%}",
            generation,
        )
    return condition(
        r.PLAN_VERIFIED,
        FALSE,
        r.KV_CACHE_DIFFERS_FROM_PLAN,
        f"{numbers}, more than {KV_TOLERANCE:.0%} off: the plan's memory figures "
        "(spec.gpus.memoryGiB, engine.gpuMemoryUtilization, engine.kvCacheDtype, "
        "engine.extraArgs) do not describe what the engine found",
        generation,
    )


def newly_unverified(old: LLMDeploymentStatus, new: LLMDeploymentStatus) -> str | None:
    """PlanVerified's message when it turns False from `old` to `new` status (the moment for one
    Warning Event), else None: a resync while it stays False says nothing again."""
    before = find(old.conditions, r.PLAN_VERIFIED)
    after = find(new.conditions, r.PLAN_VERIFIED)
    if after is not None and after.status == FALSE and (before is None or before.status != FALSE):
        return after.message
    return None
