"""An LLMDeployment's status from what the cluster shows: pure functions from live objects
(dicts) to the typed status, so the conditions can be tested without a cluster. The parts with
a job of their own are beside it: engine_crashes, unschedulable, autoscaler_status (HPA, KEDA,
ScaledToZero) and plan_verified."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmfleet.models.standby import StandbyStatus
from llmfleet.models.status import Condition, LLMDeploymentStatus, Measured
from llmfleet.planner import Plan
from llmfleet.reconcile.machinery.causes import Blocker, describe
from llmfleet.reconcile.machinery.conditions import FALSE, TRUE, condition, keep_transition_times
from llmfleet.reconcile.machinery.object_fields import condition_status, int_field

from .adapter_status import AdapterReport
from .autoscaler_status import hpa_blind, scaled_to_zero, scaler_blind
from .engine_crashes import crashes
from .plan_verified import plan_verified
from .unschedulable import GPU_SHORTAGE, shortages_in, unschedulable_pods


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
    # LoRA: what the engines hold of spec.adapters (None without LoRA).
    adapters: AdapterReport | None = None
    # Stall detection: Degraded's message naming the engines out of service ("" when none).
    stalled: str = ""
    # Standby engines asleep and awake (None without standby replicas).
    standby: StandbyStatus | None = None


# The conditions about the running children, which an invalid spec leaves as they were.
SERVING_CONDITIONS = (
    "Available",
    "Progressing",
    "Degraded",
    "ScalingLimited",
    "PlanVerified",
    "ScaledToZero",
)


def invalid_status(
    old: LLMDeploymentStatus, generation: int, reason: str, message: str
) -> LLMDeploymentStatus:
    conds = [condition("Planned", FALSE, reason, message, generation)]
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
    return condition("Degraded", TRUE, blockers[0].reason, describe(blockers), generation)


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
    ready = int_field(engine, "status", "readyReplicas")
    current = int_field(engine, "status", "replicas")
    updated = int_field(engine, "status", "updatedReplicas")
    # With an HPA, a new Deployment starts at one pod until the HPA lifts it to minReplicas.
    blind = hpa_blind(observed.hpa) or scaler_blind(observed.scaled_object)
    if observed.scaled_object is not None:
        # KEDA sets the replicas from 0 to 1 and back itself; its HPA (when active) the rest.
        active = condition_status(observed.hpa, "ScalingActive") == TRUE
        hpa_desired = int_field(observed.hpa, "status", "desiredReplicas") if active else 0
        desired = min(max(int_field(engine, "spec", "replicas"), hpa_desired), plan.max_replicas)
    elif observed.hpa is None:
        desired = plan.replicas
    elif blind is None:
        desired = max(int_field(observed.hpa, "status", "desiredReplicas"), plan.min_replicas)
    else:
        # An HPA that cannot read its metric keeps a stale desiredReplicas and only enforces the
        # bounds on the Deployment.
        desired = min(
            max(int_field(engine, "spec", "replicas"), plan.min_replicas), plan.max_replicas
        )
    old_ready = sum(int_field(d, "status", "readyReplicas") for d in observed.old_engines)
    g = generation
    conds = [condition("Planned", TRUE, "LayoutPlanned", plan.reason, g)]

    router_ready = int_field(observed.router, "status", "readyReplicas") if observed.router else 1
    if ready + old_ready > 0 and router_ready == 0:
        # status.endpoint is the router: engines that no ready router reaches serve no one.
        router_name = (observed.router or {}).get("metadata", {}).get("name", "router")
        conds.append(
            condition(
                "Available",
                FALSE,
                "RouterNotReady",
                f"{ready + old_ready} of {desired} vLLM pods ready, but the router "
                f"{router_name} (the endpoint) has no ready pod",
                g,
            )
        )
    elif ready + old_ready == 0 and desired == 0 and observed.scaled_object is not None:
        conds.append(
            condition(
                "Available",
                TRUE,
                "ScaledToZero",
                "0 vLLM pods while idle; the router holds each request until one has started",
                g,
            )
        )
    elif ready + old_ready > 0:
        conds.append(
            condition(
                "Available",
                TRUE,
                "EnginesReady",
                f"{ready + old_ready} of {desired} vLLM pods ready",
                g,
            )
        )
    elif observed.blockers:
        conds.append(
            condition(
                "Available",
                FALSE,
                observed.blockers[0].reason,
                f"0 of {desired} vLLM pods ready: {describe(observed.blockers)}",
                g,
            )
        )
    else:
        conds.append(
            condition("Available", FALSE, "NoEngineReady", f"0 of {desired} vLLM pods ready", g)
        )

    if observed.old_engines:
        names = ", ".join(sorted(d["metadata"]["name"] for d in observed.old_engines))
        conds.append(
            condition(
                "Progressing",
                TRUE,
                "LayoutTransition",
                f"new layout {ready}/{max(1, plan.min_replicas)} ready; previous "
                f"layout ({names}) keeps serving until then",
                g,
            )
        )
    elif ready < desired or updated < current or current != desired:
        conds.append(
            condition(
                "Progressing",
                TRUE,
                "RollingOut",
                f"{ready} of {desired} pods ready, {updated} of {current} updated",
                g,
            )
        )
    else:
        conds.append(
            condition("Progressing", FALSE, "Stable", f"all {desired} pods ready and up to date", g)
        )

    stuck = unschedulable_pods(observed.pods)
    if stuck:
        # The scheduler rewrites its message on every attempt; only its stable part (what is
        # short) goes into status, so a Pending pod does not rewrite status on every retry.
        shortages = sorted({s for _, msg in stuck for s in shortages_in(msg)})
        # A missing claim or a GPU no node has, named by its spec field, says more.
        said = [b for b in observed.blockers if b.said_by.startswith("scheduler")]
        short = describe(said) if said else ", ".join(shortages) or "no node matches"
        conds.append(
            condition(
                "ScalingLimited",
                TRUE,
                "InsufficientGPUs" if GPU_SHORTAGE in shortages else "Unschedulable",
                f"{len(stuck)} pod(s) Pending, cannot be scheduled: {short} "
                f"(e.g. {min(name for name, _ in stuck)})",
                g,
            )
        )
        conds.append(
            _blocked(observed.blockers, g)
            or condition(
                "Degraded", TRUE, "PodsUnschedulable", f"{len(stuck)} pod(s) cannot be scheduled", g
            )
        )
    else:
        conds.append(condition("ScalingLimited", FALSE, "Schedulable", "every pod found a node", g))
        crashed = crashes(observed.pods)
        if blocked := _blocked(observed.blockers, g):
            conds.append(blocked)
        elif observed.stalled:
            conds.append(condition("Degraded", TRUE, "EngineStalled", observed.stalled, g))
        elif crashed:
            more = f" ({len(crashed)} pods)" if len(crashed) > 1 else ""
            conds.append(
                condition("Degraded", TRUE, "EngineCrashLoop", crashed[0].describe() + more, g)
            )
        elif blind is not None:
            conds.append(condition("Degraded", TRUE, "AutoscalerBlind", blind, g))
        else:
            conds.append(condition("Degraded", FALSE, "AsPlanned", "no problem observed", g))

    if observed.scaled_object is not None:
        conds.append(scaled_to_zero(observed.scaled_object, desired, current, ready, g))

    measured = min(observed.kv_cache_tokens) if observed.kv_cache_tokens else None
    conds.append(plan_verified(measured, plan.kv_cache_tokens_per_replica, g))
    if observed.adapters is not None:
        conds.append(observed.adapters.condition)

    return LLMDeploymentStatus(
        observed_generation=g,
        conditions=keep_transition_times(conds, old.conditions),
        plan=plan.summary(),
        predicted=plan.predicted,
        replicas=desired,
        current_replicas=current,
        ready_replicas=ready,
        gpus=desired * plan.gpus_per_replica,
        endpoint=endpoint,
        measured=None if measured is None else Measured(kv_cache_tokens=measured),
        adapters=None if observed.adapters is None else observed.adapters.statuses,
        compile_cache=compile_cache,
        standby=observed.standby,
    )
