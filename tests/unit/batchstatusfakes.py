"""What an LLMBatchJob's status is computed from, as the API server holds it (its shards' pods,
its Job), and the status computed from them without a cluster: shared by the unit tests of
reconcile/llmbatchjob/batchstatus.py and of the Spare class's preemptions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmfleet.models import LLMBatchJobStatus, ShardStatus
from llmfleet.models.status import PlanSummary, status_json
from llmfleet.reconcile.llmbatchjob.batchstatus import batch_status, indexes, observe_shards
from llmfleet.shard_report import ShardReport

NOW = datetime(2026, 1, 1, 12, 10, tzinfo=UTC)
PLAN = PlanSummary(
    strategy="MultiPod",
    replicas=2,
    gpus_per_replica=1,
    tensor_parallel_size=1,
    kv_cache_tokens_per_replica=100_000,
    max_concurrent_sequences=64,
)


def pod(
    index: int,
    phase: str,
    ip: str | None = None,
    created: str = "2026-01-01T12:00:00Z",
    terminated: dict[str, Any] | None = None,
    disrupted: str | None = None,
) -> dict[str, Any]:
    """A shard pod; `disrupted`: the reason of a DisruptionTarget condition on it, as the
    scheduler (PreemptionByScheduler) or an eviction (EvictionByEvictionAPI) writes it."""
    state = {"terminated": terminated} if terminated else {"running": {}}
    conditions = (
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": disrupted,
                "message": SCHEDULER_SAID
                if disrupted == "PreemptionByScheduler"
                else "Eviction API: evicting",
                "lastTransitionTime": created,
            }
        ]
        if disrupted
        else []
    )
    name = f"j-{index}-{created[-6:-4]}{created[-3:-1]}"
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "status": {
            "phase": phase,
            **({"podIP": ip} if ip else {}),
            "conditions": conditions,
            "containerStatuses": [{"name": "runner", "state": state}],
        },
    }


# kube-scheduler's words on a victim (pkg/scheduler/framework/preemption): the scheduler's name.
SCHEDULER_SAID = "default-scheduler: preempting to accommodate a higher priority pod"


def summary(shard: int, total: int, succeeded: int, failed: int, error: str | None = None) -> str:
    return ShardReport(shard, 2, total, succeeded, failed, error=error).to_json()


def job(
    completed: str = "",
    condition: str | None = None,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    status: dict[str, Any] = {"startTime": "2026-01-01T12:00:00Z", "completedIndexes": completed}
    if condition:
        status["conditions"] = [
            {"type": condition, "status": "True", "reason": reason, "message": message}
        ]
    return {"metadata": {"name": "j"}, "status": status}


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == ctype)


def compute(
    pods: list[dict[str, Any]],
    the_job: dict[str, Any],
    scraped: dict[str, str] | None = None,
    previous: dict[int, ShardStatus] | None = None,
    preemptors: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    status = the_job["status"]
    observed = observe_shards(
        2,
        pods,
        indexes(status.get("completedIndexes")),
        indexes(status.get("failedIndexes")),
        (scraped or {}).get,
        previous or {},
    )
    return status_json(
        batch_status(
            old=LLMBatchJobStatus(),
            generation=1,
            planned=PLAN,
            shards=2,
            job=the_job,
            observed=observed,
            at=NOW,
            preemptors=preemptors,
        )
    )


T0, T1 = "2026-01-01T12:00:00Z", "2026-01-01T12:05:00Z"
STOPPED = {"exitCode": 143, "message": summary(0, 150, 60, 0)}
VICTIM = pod(0, "Failed", None, T0, STOPPED, disrupted="PreemptionByScheduler")
