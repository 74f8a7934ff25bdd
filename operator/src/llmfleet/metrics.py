"""The operator's own Prometheus metrics (prefix llmfleet_)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from llmfleet.planner import Plan

RECONCILES = Counter("llmfleet_reconcile", "Reconciles by result", ["result"])
RECONCILE_DURATION = Histogram(
    "llmfleet_reconcile_duration_seconds",
    "Time one reconcile takes",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
API_WRITES = Counter("llmfleet_api_writes", "Writes to the Kubernetes API", ["verb", "kind"])
PLANNED_REPLICAS = Gauge(
    "llmfleet_plan_replicas",
    "Planned pods of an LLMDeployment, by layout",
    ["namespace", "llmdeployment", "strategy", "tensor_parallel_size", "gpus_per_replica"],
)
_layouts: dict[tuple[str, str], tuple[str, str, str]] = {}


def set_planned(namespace: str, name: str, plan: Plan | None) -> None:
    key = (namespace, name)
    previous = _layouts.pop(key, None)
    if previous is not None:
        PLANNED_REPLICAS.remove(namespace, name, *previous)
    if plan is not None:
        layout = (plan.strategy, str(plan.tensor_parallel_size), str(plan.gpus_per_replica))
        PLANNED_REPLICAS.labels(namespace, name, *layout).set(plan.replicas)
        _layouts[key] = layout
