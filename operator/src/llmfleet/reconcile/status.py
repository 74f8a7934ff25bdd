"""An LLMDeployment's status from what the cluster shows: pure functions from live objects
(dicts) to the typed status, so the conditions can be tested without a cluster."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmfleet.models.status import Condition, LLMDeploymentStatus, Measured
from llmfleet.planner import Plan
from llmfleet.reconcile.adapter_status import AdapterReport
from llmfleet.reconcile.causes import Blocker, describe
from llmfleet.reconcile.conditions import (
    FALSE,
    TRUE,
    UNKNOWN,
    condition,
    find,
    keep_transition_times,
)
from llmfleet.render.autoscaling import QUEUE_METRIC
from llmfleet.render.names import ENGINE_CONTAINER

# How far the KV cache an engine allocated may be from the planner's figure for PlanVerified.
KV_TOLERANCE = 0.10


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


def _unschedulable(pods: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    found = []
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Pending":
            continue
        for c in (p.get("status") or {}).get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == FALSE
                and c.get("reason") == "Unschedulable"
            ):
                found.append((p["metadata"]["name"], c.get("message", "")))
    return found


# Said of an engine that died for want of memory: the exit reason, or vLLM's and PyTorch's words.
_OUT_OF_MEMORY = re.compile(
    r"OOMKilled|CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks|"
    r"larger than the available KV cache memory",
    re.IGNORECASE,
)
OUT_OF_MEMORY_ADVICE = (
    "the engine ran out of memory: quantize to fp8 (spec.model.quantization), give it more GPUs "
    "(spec.gpus.count) or a shorter context (spec.engine.maxModelLen)"
)
# A log line's prefix (level, date, time, source), which differs on every crash.
_LOG_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)?\s*"
    r"(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*)?(\[[^\]]*\]\s*)?"
)


@dataclass(frozen=True)
class Crash:
    """An engine container that keeps exiting, with what it said last."""

    pod: str
    reason: str
    exit_code: int
    message: str

    def describe(self) -> str:
        said = f": {self.message}" if self.message else ""
        advice = (
            f"; {OUT_OF_MEMORY_ADVICE}"
            if _OUT_OF_MEMORY.search(f"{self.reason} {self.message}")
            else ""
        )
        return (
            f"engine pod {self.pod} keeps exiting (last: {self.reason}, exit code "
            f"{self.exit_code}){said}{advice}"
        )


def _last_words(message: str) -> str:
    """The last line of a termination message (a log's tail), without its timestamp, so that
    the same failure reads the same on every restart."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return _LOG_PREFIX.sub("", lines[-1])[:300] if lines else ""


def crashes(pods: tuple[dict[str, Any], ...]) -> list[Crash]:
    """Engine containers that exited with an error and were restarted (CrashLoopBackOff on a
    real kubelet), oldest pod name first."""
    found = []
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") != ENGINE_CONTAINER or not cs.get("restartCount"):
                continue
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if not last or int(last.get("exitCode") or 0) == 0:
                continue
            if "running" in (cs.get("state") or {}) and cs.get("ready"):
                continue  # it came back and serves
            found.append(
                Crash(
                    pod=p["metadata"]["name"],
                    reason=str(last.get("reason") or "Error"),
                    exit_code=int(last.get("exitCode") or 0),
                    message=_last_words(str(last.get("message") or "")),
                )
            )
    return sorted(found, key=lambda c: c.pod)


GPU_SHORTAGE = "Insufficient nvidia.com/gpu"
_SHORTAGE = re.compile(
    r"Insufficient [\w./-]*\w|Too many pods|didn't match [^,.]+"
    # What the scheduler's volume binding says of a pod's claims (spec.model.cache): missing,
    # going, unbound, or no volume to bind.
    r'|persistentvolumeclaim "[^"]+" (?:not found|is being deleted'
    r'|bound to non-existent persistentvolume "[^"]+")'
    r"|unbound immediate PersistentVolumeClaims|didn't find available persistent volumes to bind"
)


def _shortages(message: str) -> set[str]:
    return set(_SHORTAGE.findall(message))


def _int(obj: dict[str, Any] | None, *path: str) -> int:
    cur: Any = obj
    for key in path:
        cur = (cur or {}).get(key)
    return int(cur or 0)


def _hpa_blind(hpa: dict[str, Any] | None) -> str | None:
    """Why the HPA cannot scale on the queue metric, or None when it can (or is not there)."""
    for c in ((hpa or {}).get("status") or {}).get("conditions") or []:
        # ScalingDisabled: the target is at zero replicas (scaled to zero by KEDA), by design.
        if (
            c.get("type") == "ScalingActive"
            and c.get("status") == FALSE
            and c.get("reason") != "ScalingDisabled"
        ):
            return (
                f"the HorizontalPodAutoscaler cannot scale ({c.get('reason')}): "
                f"{c.get('message', '')}; is prometheus-adapter serving {QUEUE_METRIC}?"
            )
    return None


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


def _scaler_blind(scaled_object: dict[str, Any] | None) -> str | None:
    """Why KEDA cannot scale the engines (to zero and back), or None."""
    for c in ((scaled_object or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == FALSE:
            return (
                f"KEDA's ScaledObject is not Ready ({c.get('reason')}): {c.get('message', '')}; "
                "can KEDA reach the Prometheus of --keda-prometheus-url?"
            )
    return None


def _condition_status(obj: dict[str, Any] | None, kind: str) -> str | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def scaled_to_zero(
    scaled_object: dict[str, Any], desired: int, current: int, ready: int, generation: int
) -> Condition:
    """ScaledToZero, for an LLMDeployment with autoscaling.minReplicas 0: True while it has no
    engine pod (and holds no GPU)."""
    idle = _int(scaled_object, "spec", "cooldownPeriod")
    if _condition_status(scaled_object, "Ready") == FALSE:
        message = next(
            (
                str(c.get("message", ""))
                for c in (scaled_object.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            "",
        )
        return condition(
            "ScaledToZero",
            UNKNOWN,
            "ScalerNotReady",
            f"KEDA cannot scale: {message}",
            generation,
        )
    if desired == 0 and current == 0:
        since = (scaled_object.get("status") or {}).get("lastActiveTime")
        last = f" since {since}" if since else ""
        return condition(
            "ScaledToZero",
            TRUE,
            "Idle",
            f"no request{last} for {idle} s: 0 engine pods, 0 GPUs; the next request starts one",
            generation,
        )
    if ready == 0:
        return condition(
            "ScaledToZero",
            FALSE,
            "Waking",
            f"a request arrived: {desired} engine pod(s) starting; the router holds requests "
            "until one is ready",
            generation,
        )
    return condition(
        "ScaledToZero",
        FALSE,
        "Serving",
        f"{ready} engine pod(s) serving; scales to zero after {idle} s without a request",
        generation,
    )


def plan_verified(measured: int | None, planned: int, generation: int) -> Condition:
    """PlanVerified: does the smallest KV cache a ready engine allocated match the plan's
    kvCacheTokensPerReplica within KV_TOLERANCE? Unknown until an engine has reported."""
    if measured is None:
        return condition(
            "PlanVerified",
            UNKNOWN,
            "NoEngineReported",
            "no ready engine of the current layout has reported its KV cache yet "
            "(vllm:cache_config_info)",
            generation,
        )
    deviation = (measured - planned) / planned if planned else (0.0 if measured == 0 else 1.0)
    numbers = (
        f"engines allocated {measured:,} KV-cache tokens (the smallest pod), "
        f"the plan {planned:,} per pod: {deviation:+.1%}"
    )
    if abs(deviation) <= KV_TOLERANCE:
        return condition(
            "PlanVerified",
            TRUE,
            "KVCacheMatchesPlan",
            f"{numbers}, within {KV_TOLERANCE:.0%}",
            generation,
        )
    return condition(
        "PlanVerified",
        FALSE,
        "KVCacheDiffersFromPlan",
        f"{numbers}, more than {KV_TOLERANCE:.0%} off: the plan's memory figures "
        "(spec.gpus.memoryGiB, engine.gpuMemoryUtilization, engine.extraArgs) do not describe "
        "what the engine found",
        generation,
    )


def newly_unverified(old: LLMDeploymentStatus, new: LLMDeploymentStatus) -> str | None:
    """PlanVerified's message when it turns False from `old` to `new` status (the moment for one
    Warning Event), else None: a resync while it stays False says nothing again."""
    before = find(old.conditions, "PlanVerified")
    after = find(new.conditions, "PlanVerified")
    if after is not None and after.status == FALSE and (before is None or before.status != FALSE):
        return after.message
    return None


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
) -> LLMDeploymentStatus:
    engine = observed.engine
    ready = _int(engine, "status", "readyReplicas")
    current = _int(engine, "status", "replicas")
    updated = _int(engine, "status", "updatedReplicas")
    # With an HPA, a new Deployment starts at one pod until the HPA lifts it to minReplicas.
    blind = _hpa_blind(observed.hpa) or _scaler_blind(observed.scaled_object)
    if observed.scaled_object is not None:
        # KEDA sets the replicas from 0 to 1 and back itself; its HPA (when active) the rest.
        active = _condition_status(observed.hpa, "ScalingActive") == TRUE
        hpa_desired = _int(observed.hpa, "status", "desiredReplicas") if active else 0
        desired = min(max(_int(engine, "spec", "replicas"), hpa_desired), plan.max_replicas)
    elif observed.hpa is None:
        desired = plan.replicas
    elif blind is None:
        desired = max(_int(observed.hpa, "status", "desiredReplicas"), plan.min_replicas)
    else:
        # An HPA that cannot read its metric keeps a stale desiredReplicas and only enforces the
        # bounds on the Deployment.
        desired = min(max(_int(engine, "spec", "replicas"), plan.min_replicas), plan.max_replicas)
    old_ready = sum(_int(d, "status", "readyReplicas") for d in observed.old_engines)
    g = generation
    conds = [condition("Planned", TRUE, "LayoutPlanned", plan.reason, g)]

    router_ready = _int(observed.router, "status", "readyReplicas") if observed.router else 1
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

    stuck = _unschedulable(observed.pods)
    if stuck:
        # The scheduler rewrites its message on every attempt; only its stable part (what is
        # short) goes into status, so a Pending pod does not rewrite status on every retry.
        shortages = sorted({s for _, msg in stuck for s in _shortages(msg)})
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
    )
