"""The operator's own Prometheus metrics (prefix llmfleet_).

Every per-resource series carries `namespace` and `llmdeployment` labels naming the
LLMDeployment. Scrape the operator with `honor_labels: true` (ServiceMonitor `honorLabels: true`):
otherwise Prometheus renames the metric's `namespace` to `exported_namespace`, because the scrape
target has a `namespace` label of its own (the operator's namespace).

The helpers below are pure bookkeeping over prometheus-client objects (no Kubernetes calls); the
reconciler calls them with what it already has in hand; each docstring says who calls it.
The operator's metrics of its own work (reconciles, errors, API writes) are in
metrics_reconcile.py, its queues' in metrics_workqueue.py.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram

from llmfleet.render.names import LAYOUT_LABEL, layout_id

if TYPE_CHECKING:
    from llmfleet.models import LLMDeploymentSpec
    from llmfleet.planner import Plan

# Scraped per operator pod, so the pod label of the series at 1 names the replica that writes.
LEADER = Gauge(
    "llmfleet_operator_leader",
    "1 while this operator replica holds the leader Lease and reconciles; 0 while it stands by",
)
LEADER_TRANSITIONS = Counter(
    "llmfleet_operator_leader_acquisitions", "Times this replica acquired the leader Lease"
)
PLANNED_REPLICAS = Gauge(
    "llmfleet_plan_replicas",
    "Planned pods of an LLMDeployment, by layout",
    ["namespace", "llmdeployment", "strategy", "tensor_parallel_size", "gpus_per_replica"],
)
# The plan's speed prediction for one engine pod (status.predicted), so dashboards can hold
# vLLM's measured throughput against it; absent when the GPU has no performance constants.
PREDICTED_OUTPUT_TPS = Gauge(
    "llmfleet_predicted_output_tokens_per_second",
    "Generated tokens/s the planner predicts for one engine pod saturated at the planned "
    "concurrency, for spec.workload (status.predicted.outputTokensPerSecond)",
    ["namespace", "llmdeployment"],
)
PREDICTED_CONCURRENCY = Gauge(
    "llmfleet_predicted_concurrency",
    "Sequences per engine pod the prediction assumes (vLLM --max-num-seqs; "
    "status.predicted.concurrency)",
    ["namespace", "llmdeployment"],
)
CONDITIONS = Gauge(
    "llmfleet_condition",
    "Current status conditions of each LLMDeployment: 1 for the condition's current "
    "(type, status, reason); a series disappears when the condition changes",
    ["namespace", "llmdeployment", "type", "status", "reason"],
)
PLANNER_DECISIONS = Counter(
    "llmfleet_planner_decisions",
    "Layouts the planner chose (counted when an LLMDeployment's layout changes, and once per "
    "LLMDeployment when the operator starts); strategy=Failed when no layout fits",
    ["objective", "requested_strategy", "strategy", "layout"],
)
ENGINE_STALLS = Counter(
    "llmfleet_engine_stalls",
    "Engine pods taken out of service for having requests running and counting no token for a "
    "window (spec.engine.stallDetection)",
    ["namespace", "llmdeployment"],
)
STANDBY_ENGINES = Gauge(
    "llmfleet_standby_engines",
    "Standby engines (spec.autoscaling.standby) that answer, by state: asleep or awake",
    ["namespace", "llmdeployment", "state"],
)
STANDBY_CALLS = Counter(
    "llmfleet_standby_transitions",
    "Standby engines the operator woke (to=awake) or put back to sleep (to=asleep)",
    ["namespace", "llmdeployment", "to"],
)
# Pod creation to Ready: scheduling, image pull, weight download and load, warm-up.
ENGINE_STARTUP_BUCKETS = (15, 30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600, 7200)
ENGINE_STARTUP = Histogram(
    "llmfleet_engine_startup_seconds",
    "Seconds from an engine pod's creation to its first Ready condition, as the operator saw it",
    ["namespace", "llmdeployment", "layout"],
    buckets=ENGINE_STARTUP_BUCKETS,
)

# Pods that became Ready longer ago than this are not observed: after an operator restart the
# pods already running would otherwise be counted a second time.
STARTUP_OBSERVATION_WINDOW_SECONDS = 900.0

_lock = threading.Lock()
_stalls: set[tuple[str, str]] = set()  # LLMDeployments with an ENGINE_STALLS series
_standby: set[tuple[str, str]] = set()  # with STANDBY_ENGINES and STANDBY_CALLS series
_layouts: dict[tuple[str, str], tuple[str, str, str]] = {}
_conditions: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
_decisions: dict[tuple[str, str], tuple[str, str, str, str]] = {}
_started: dict[tuple[str, str], set[str]] = {}
_startup_layouts: dict[tuple[str, str], set[str]] = {}


def set_planned(namespace: str, name: str, plan: Plan | None) -> None:
    key = (namespace, name)
    with _lock:
        previous = _layouts.pop(key, None)
        if previous is not None:
            PLANNED_REPLICAS.remove(namespace, name, *previous)
        if plan is not None:
            layout = (plan.strategy, str(plan.tensor_parallel_size), str(plan.gpus_per_replica))
            PLANNED_REPLICAS.labels(namespace, name, *layout).set(plan.replicas)
            _layouts[key] = layout
        predicted = plan.predicted if plan is not None else None
        if predicted is None:
            for gauge in (PREDICTED_OUTPUT_TPS, PREDICTED_CONCURRENCY):
                with contextlib.suppress(KeyError):
                    gauge.remove(namespace, name)
        else:
            PREDICTED_OUTPUT_TPS.labels(namespace, name).set(predicted.output_tokens_per_second)
            PREDICTED_CONCURRENCY.labels(namespace, name).set(predicted.concurrency)


def set_conditions(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]]) -> None:
    """Publish the LLMDeployment's current status conditions (`llmfleet_condition`).

    Called by `reconcile.llmdeployment.controller.Controller` with the status just computed, whether
    or not it was written: when it refuses a spec and when it ran a planned one."""
    current = {
        (str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason") or ""))
        for c in conditions
        if c.get("type")
    }
    key = (namespace, name)
    with _lock:
        for gone in _conditions.get(key, set()) - current:
            CONDITIONS.remove(namespace, name, *gone)
        for ctype, status, reason in current:
            CONDITIONS.labels(namespace, name, ctype, status, reason).set(1)
        _conditions[key] = current


def layout_of(plan: Plan | None) -> str:
    """The `llmfleet.dev/layout` value of a plan (tp<N> or cpu), or "none"."""
    return "none" if plan is None else layout_id(plan)


def record_planner_decision(
    namespace: str, name: str, spec: LLMDeploymentSpec, plan: Plan | None
) -> bool:
    """Count the planner's decision for an LLMDeployment when it differs from the last one this
    process counted for it (so resyncs do not inflate it); `plan=None` when planning failed.
    Returns whether it was counted.

    Called by the Controller after planning: with the plan when it ran one, with None when it
    refused a valid spec that no layout fits."""
    decision = (
        str(spec.objective),
        str(spec.strategy),
        plan.strategy if plan is not None else "Failed",
        layout_of(plan),
    )
    key = (namespace, name)
    with _lock:
        if _decisions.get(key) == decision:
            return False
        _decisions[key] = decision
        PLANNER_DECISIONS.labels(*decision).inc()
    return True


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def ready_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's Ready condition last became True, or None if it is not Ready."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") != "True":
                return None
            return _timestamp(c.get("lastTransitionTime") or c.get("last_transition_time"))
    return None


def engine_startup_seconds(pod: Mapping[str, Any]) -> float | None:
    """Seconds from the pod's creation to its Ready condition turning True, from the pod object
    alone (a dict as the API returns it, camelCase or snake_case, timestamps as RFC 3339
    strings or datetimes). None when the pod is not Ready or a timestamp is missing.

    Measures creation -> Ready: waiting for a node (GPUs), image pull, model download and load,
    warm-up. A pod that was Ready, became unready and Ready again reports its latest transition;
    `observe_engine_startups` observes each pod once, shortly after it first becomes Ready."""
    meta = pod.get("metadata") or {}
    created = _timestamp(meta.get("creationTimestamp") or meta.get("creation_timestamp"))
    ready = ready_since(pod)
    if created is None or ready is None:
        return None
    return max(0.0, (ready - created).total_seconds())


def observe_engine_startups(
    namespace: str,
    name: str,
    pods: Iterable[Mapping[str, Any]],
    now: datetime | None = None,
) -> int:
    """Observe `llmfleet_engine_startup_seconds` for engine pods of one LLMDeployment that became
    Ready since the last call (each pod uid once; pods Ready for longer than
    STARTUP_OBSERVATION_WINDOW_SECONDS are skipped, so an operator restart does not count the
    running pods again). Returns how many were observed.

    Called by the Controller with the engine pods it listed with the children selector; the
    layout comes from each pod's llmfleet.dev/layout label."""
    moment = now or datetime.now(UTC)
    key = (namespace, name)
    count = 0
    with _lock:
        seen = _started.setdefault(key, set())
        present: set[str] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
            present.add(uid)
            if uid in seen:
                continue
            seconds = engine_startup_seconds(pod)
            since = ready_since(pod)
            if seconds is None or since is None:
                continue
            seen.add(uid)
            if (moment - since).total_seconds() > STARTUP_OBSERVATION_WINDOW_SECONDS:
                continue
            layout = str((meta.get("labels") or {}).get(LAYOUT_LABEL) or "unknown")
            ENGINE_STARTUP.labels(namespace, name, layout).observe(seconds)
            _startup_layouts.setdefault(key, set()).add(layout)
            count += 1
        # Forget pods that are gone, so the set stays as small as the fleet.
        seen &= present
    return count


def forget(namespace: str, name: str) -> None:
    """Drop every per-LLMDeployment series and the bookkeeping of a deleted LLMDeployment.

    Called by `Controller.forget` once the object is gone or has a deletionTimestamp."""
    set_planned(namespace, name, None)
    set_conditions(namespace, name, ())
    key = (namespace, name)
    with _lock:
        _conditions.pop(key, None)
        _decisions.pop(key, None)
        _started.pop(key, None)
        for layout in _startup_layouts.pop(key, set()):
            ENGINE_STARTUP.remove(namespace, name, layout)
        if key in _stalls:
            _stalls.discard(key)
            ENGINE_STALLS.remove(namespace, name)
    forget_standby(namespace, name)


def set_standby(
    namespace: str, name: str, *, asleep: int, awake: int, woken: int, slept: int
) -> None:
    """The LLMDeployment's standby engines now, and those this reconcile woke or put to sleep."""
    with _lock:
        _standby.add((namespace, name))
        STANDBY_ENGINES.labels(namespace, name, "asleep").set(asleep)
        STANDBY_ENGINES.labels(namespace, name, "awake").set(awake)
        STANDBY_CALLS.labels(namespace, name, "awake").inc(woken)
        STANDBY_CALLS.labels(namespace, name, "asleep").inc(slept)


def forget_standby(namespace: str, name: str) -> None:
    with _lock:
        if (namespace, name) in _standby:
            _standby.discard((namespace, name))
            for state in ("asleep", "awake"):
                STANDBY_ENGINES.remove(namespace, name, state)
                STANDBY_CALLS.remove(namespace, name, state)


def count_engine_stalls(namespace: str, name: str, pods: int) -> None:
    """`pods` engines of the LLMDeployment were just taken out of service as stalled."""
    with _lock:
        _stalls.add((namespace, name))
        ENGINE_STALLS.labels(namespace, name).inc(pods)
