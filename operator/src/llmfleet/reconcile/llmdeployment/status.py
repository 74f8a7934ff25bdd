"""An LLMDeployment's status from what the cluster shows: pure functions from live objects
(dicts) to the typed status, so the conditions can be tested without a cluster. One function per
condition (`available`, `progressing`, `scaling_limited`, `degraded`); those with a job of their
own are beside it: autoscaler_status (ScaledToZero), plan_verified, adapter_status (AdaptersReady),
and what Degraded and ScalingLimited read: engine_crashes, unschedulable. Their reasons are named
in `reasons`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llmfleet.models.standby import StandbyStatus
from llmfleet.models.status import Condition, LLMDeploymentStatus, Measured
from llmfleet.planner import Plan
from llmfleet.reconcile.machinery.causes import Blocker, describe
from llmfleet.reconcile.machinery.conditions import (
    FALSE,
    TRUE,
    condition,
    find,
    keep_transition_times,
)
from llmfleet.reconcile.machinery.object_fields import condition_status, int_field
from llmfleet.reconcile.machinery.scheduler_words import GPU_SHORTAGE, shortages_in

from . import reasons as r
from .adapter_status import AdapterReport
from .autoscaler_status import hpa_blind, scaled_to_zero, scaler_blind
from .engine_crashes import crashes
from .full_pool_roll import NO_ROLL, FullPoolRoll, roll_waits, without
from .plan_verified import plan_verified
from .unschedulable import unschedulable_pods


@dataclass(frozen=True)
class Observed:
    """What the reconcile saw of the children after applying them."""

    engine: dict[str, Any] | None  # the Deployment of the current layout
    old_engines: tuple[dict[str, Any], ...]  # Deployments of a previous layout still running
    hpa: dict[str, Any] | None
    pods: tuple[dict[str, Any], ...]
    # KV-cache tokens each ready engine of the current layout reported (vllm:cache_config_info).
    kv_cache_tokens: tuple[int, ...] = ()
    # The vLLM Router's Deployment when status.endpoint is the router (multi-replica plans).
    router: dict[str, Any] | None = None
    # KEDA's ScaledObject when the LLMDeployment scales to zero (then `hpa` is KEDA's HPA).
    scaled_object: dict[str, Any] | None = None
    # Why pods cannot run, as the scheduler and the kubelet say it, attributed to spec fields.
    blockers: tuple[Blocker, ...] = ()
    # A rollout whose new pods wait for GPUs the earlier pods hold (full_pool_roll.py).
    roll: FullPoolRoll = NO_ROLL
    # LoRA: what the engines hold of spec.adapters (None without LoRA).
    adapters: AdapterReport | None = None
    # Stall detection: Degraded's message naming the engines out of service ("" when none).
    stalled: str = ""
    # Standby engines asleep and awake (None without standby replicas).
    standby: StandbyStatus | None = None


# The conditions about the running children, which an invalid spec leaves as they were.
SERVING_CONDITIONS = (
    r.AVAILABLE,
    r.PROGRESSING,
    r.DEGRADED,
    r.SCALING_LIMITED,
    r.PLAN_VERIFIED,
    r.SCALED_TO_ZERO,
)


def invalid_status(
    old: LLMDeploymentStatus, generation: int, reason: str, message: str
) -> LLMDeploymentStatus:
    conds = [condition(r.PLANNED, FALSE, reason, message, generation)]
    # The children of the last good spec keep serving; say so instead of hiding them.
    conds += [c for c in old.conditions if c.type in SERVING_CONDITIONS]
    return old.model_copy(
        update={
            "observed_generation": generation,
            "conditions": keep_transition_times(conds, old.conditions),
        }
    )


def _blocked(blockers: tuple[Blocker, ...], generation: int) -> Condition | None:
    """Degraded, naming the spec field behind each pod that cannot run; None when none."""
    if not blockers:
        return None
    return condition(r.DEGRADED, TRUE, blockers[0].reason, describe(blockers), generation)


@dataclass(frozen=True)
class _Counts:
    """The engine pods the conditions speak of."""

    ready: int  # of the current layout
    old_ready: int  # of previous layouts still serving
    desired: int
    current: int
    updated: int


def _desired(plan: Plan, observed: Observed, blind: str | None) -> int:
    """How many engine pods there should be now: the plan's, the HPA's or KEDA's."""
    engine = observed.engine
    if observed.scaled_object is not None:
        # KEDA sets the replicas from 0 to 1 and back itself; its HPA (when active) the rest.
        active = condition_status(observed.hpa, "ScalingActive") == TRUE
        hpa_desired = int_field(observed.hpa, "status", "desiredReplicas") if active else 0
        return min(max(int_field(engine, "spec", "replicas"), hpa_desired), plan.max_replicas)
    if observed.hpa is None:
        return plan.replicas
    if blind is None:
        return max(int_field(observed.hpa, "status", "desiredReplicas"), plan.min_replicas)
    # An HPA that cannot read its metric keeps a stale desiredReplicas and only enforces the
    # bounds on the Deployment.
    return min(max(int_field(engine, "spec", "replicas"), plan.min_replicas), plan.max_replicas)


def available(observed: Observed, n: _Counts, g: int) -> Condition:
    """Available: does any vLLM pod serve, through the router when there is one?"""
    serving = n.ready + n.old_ready
    router_ready = int_field(observed.router, "status", "readyReplicas") if observed.router else 1
    if serving > 0 and router_ready == 0:
        # status.endpoint is the router: engines that no ready router reaches serve no one.
        router_name = (observed.router or {}).get("metadata", {}).get("name", "router")
        return condition(
            r.AVAILABLE,
            FALSE,
            r.ROUTER_NOT_READY,
            f"{serving} of {n.desired} vLLM pods ready, but the router "
            f"{router_name} (the endpoint) has no ready pod",
            g,
        )
    if serving == 0 and n.desired == 0 and observed.scaled_object is not None:
        return condition(
            r.AVAILABLE,
            TRUE,
            r.IDLE_AT_ZERO,
            "0 vLLM pods while idle; the router holds each request until one has started",
            g,
        )
    if serving > 0:
        message = f"{serving} of {n.desired} vLLM pods ready"
        return condition(r.AVAILABLE, TRUE, r.ENGINES_READY, message, g)
    if observed.blockers:
        return condition(
            r.AVAILABLE,
            FALSE,
            observed.blockers[0].reason,
            f"0 of {n.desired} vLLM pods ready: {describe(observed.blockers)}",
            g,
        )
    message = f"0 of {n.desired} vLLM pods ready"
    return condition(r.AVAILABLE, FALSE, r.NO_ENGINE_READY, message, g)


def progressing(observed: Observed, plan: Plan, n: _Counts, g: int) -> Condition:
    """Progressing: is a new layout or a rollout on its way?"""
    if observed.old_engines:
        names = ", ".join(sorted(d["metadata"]["name"] for d in observed.old_engines))
        return condition(
            r.PROGRESSING,
            TRUE,
            r.LAYOUT_TRANSITION,
            f"new layout {n.ready}/{max(1, plan.min_replicas)} ready; previous "
            f"layout ({names}) keeps serving until then",
            g,
        )
    counts = f"{n.ready} of {n.desired} pods ready, {n.updated} of {n.current} updated"
    roll = observed.roll
    if roll.replace_first:
        return condition(
            r.PROGRESSING,
            TRUE,
            r.REPLACING_UNSERVING_PODS,
            f"{counts}; no GPU is free for a new pod, so the pods of the earlier template that "
            f"serve nothing are replaced first: {', '.join(roll.replace_first)}",
            g,
        )
    if roll.one_at_a_time:
        return condition(
            r.PROGRESSING,
            TRUE,
            r.ROLLING_ONE_AT_A_TIME,
            f"{counts}; no GPU is free for a new pod, so the pods are replaced one at a time in "
            "place (maxSurge 0, maxUnavailable 1, as the PodDisruptionBudget allows): all but "
            "one keep serving",
            g,
        )
    if roll.waiting:
        return condition(
            r.PROGRESSING,
            TRUE,
            r.WAITING_FOR_GPUS_TO_ROLL,
            f"{counts}; no GPU is free for the new pod {', '.join(roll.waiting)}, and the pods "
            "of the earlier template keep serving until it is Ready: pods are replaced in place "
            "only while 2 or more serve and every earlier one does, so the rollout goes on when "
            "a GPU frees up",
            g,
        )
    if n.ready < n.desired or n.updated < n.current or n.current != n.desired:
        return condition(r.PROGRESSING, TRUE, r.ROLLING_OUT, counts, g)
    message = f"all {n.desired} pods ready and up to date"
    return condition(r.PROGRESSING, FALSE, r.STABLE, message, g)


def newly_announced(old: LLMDeploymentStatus, new: LLMDeploymentStatus) -> tuple[str, str] | None:
    """Progressing's reason and message when a rollout on a full GPU pool has just begun one of
    its ways (r.ANNOUNCED; for the Event, once); None otherwise."""
    now = find(new.conditions, r.PROGRESSING)
    if now is None or now.reason not in r.ANNOUNCED:
        return None
    before = find(old.conditions, r.PROGRESSING)
    return None if before is not None and before.reason == now.reason else (now.reason, now.message)


def scaling_limited(observed: Observed, stuck: list[tuple[str, str]], g: int) -> Condition:
    """ScalingLimited: are pods Pending because the scheduler cannot place them?"""
    if not stuck:
        return condition(r.SCALING_LIMITED, FALSE, r.SCHEDULABLE, "every pod found a node", g)
    # The scheduler rewrites its message on every attempt; only its stable part (what is
    # short) goes into status, so a Pending pod does not rewrite status on every retry.
    shortages = sorted({s for _, msg in stuck for s in shortages_in(msg)})
    # A missing claim or a GPU no node has, named by its spec field, says more.
    said = [b for b in observed.blockers if b.said_by.startswith("scheduler")]
    short = describe(said) if said else ", ".join(shortages) or "no node matches"
    return condition(
        r.SCALING_LIMITED,
        TRUE,
        r.INSUFFICIENT_GPUS if GPU_SHORTAGE in shortages else r.UNSCHEDULABLE,
        f"{len(stuck)} pod(s) Pending, cannot be scheduled: {short} "
        f"(e.g. {min(name for name, _ in stuck)})",
        g,
    )


def degraded(
    observed: Observed, stuck: list[tuple[str, str]], blind: str | None, g: int
) -> Condition:
    """Degraded: the first problem found, in this order: a pod that cannot run for a missing
    object, one that cannot be scheduled, a stalled engine, a crash loop, a blind autoscaler."""
    if blocked := _blocked(observed.blockers, g):
        return blocked
    if stuck:
        message = f"{len(stuck)} pod(s) cannot be scheduled"
        return condition(r.DEGRADED, TRUE, r.PODS_UNSCHEDULABLE, message, g)
    if observed.stalled:
        return condition(r.DEGRADED, TRUE, r.ENGINE_STALLED, observed.stalled, g)
    if crashed := crashes(observed.pods):
        more = f" ({len(crashed)} pods)" if len(crashed) > 1 else ""
        return condition(r.DEGRADED, TRUE, r.ENGINE_CRASH_LOOP, crashed[0].describe() + more, g)
    if blind is not None:
        return condition(r.DEGRADED, TRUE, r.AUTOSCALER_BLIND, blind, g)
    return condition(r.DEGRADED, FALSE, r.AS_PLANNED, "no problem observed", g)


def ready_status(
    *,
    old: LLMDeploymentStatus,
    generation: int,
    plan: Plan,
    observed: Observed,
    endpoint: str,
    compile_cache: str | None = None,
) -> LLMDeploymentStatus:
    engine = observed.engine
    # With an HPA, a new Deployment starts at one pod until the HPA lifts it to minReplicas.
    blind = hpa_blind(observed.hpa) or scaler_blind(observed.scaled_object)
    n = _Counts(
        ready=int_field(engine, "status", "readyReplicas"),
        old_ready=sum(int_field(d, "status", "readyReplicas") for d in observed.old_engines),
        desired=_desired(plan, observed, blind),
        current=int_field(engine, "status", "replicas"),
        updated=int_field(engine, "status", "updatedReplicas"),
    )
    g = generation
    stuck = unschedulable_pods(observed.pods)
    # A rollout's pods waiting for the GPUs of the pods they replace are no fault of the fleet's.
    waits = roll_waits(observed.roll, n.ready, n.desired)
    faults = replace(observed, blockers=without(observed.blockers, waits))
    conds = [
        condition(r.PLANNED, TRUE, r.LAYOUT_PLANNED, plan.reason, g),
        available(observed, n, g),
        progressing(observed, plan, n, g),
        scaling_limited(observed, stuck, g),
        degraded(faults, [s for s in stuck if s[0] not in waits], blind, g),
    ]
    if observed.scaled_object is not None:
        conds.append(scaled_to_zero(observed.scaled_object, n.desired, n.current, n.ready, g))

    measured = min(observed.kv_cache_tokens) if observed.kv_cache_tokens else None
    conds.append(
        plan_verified(
            measured, plan.kv_cache_tokens_per_replica, g, plan.kv_cache_tokens_compile_cached
        )
    )
    if observed.adapters is not None:
        conds.append(observed.adapters.condition)

    return LLMDeploymentStatus(
        observed_generation=g,
        conditions=keep_transition_times(conds, old.conditions),
        plan=plan.summary(),
        predicted=plan.predicted,
        replicas=n.desired,
        current_replicas=n.current,
        ready_replicas=n.ready,
        gpus=n.desired * plan.gpus_per_replica,
        endpoint=endpoint,
        measured=None if measured is None else Measured(kv_cache_tokens=measured),
        adapters=None if observed.adapters is None else observed.adapters.statuses,
        compile_cache=compile_cache,
        standby=observed.standby,
    )
