"""LLMBatchJob status from what the cluster shows: shards' pods, their metrics and termination
messages, and the Job's conditions. Pure functions, no cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import generate_latest

from llmfleet.batch.progress import Progress
from llmfleet.models import LLMBatchJobSpec, LLMBatchJobStatus, ShardStatus
from llmfleet.models.status import PlanSummary, status_json
from llmfleet.reconcile.batchstatus import (
    batch_status,
    indexes,
    observe_shards,
    output_conflict,
    refused_status,
)
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
) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {
        "metadata": {
            "name": f"j-{index}-{created[-3:-1]}",
            "creationTimestamp": created,
            "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "status": {
            "phase": phase,
            **({"podIP": ip} if ip else {}),
            "containerStatuses": [{"name": "runner", "state": state}],
        },
    }


def metrics(shard: int, total: int, succeeded: int, failed: int, rate: float) -> str:
    p = Progress(shard=shard, shards=2, total=total, succeeded=succeeded, failed=failed)
    p.completion_tokens = 10 * succeeded
    p.engine_started = 0.0
    p.run_completion_tokens = int(rate)  # with engine_started 0, rate is per process uptime
    p.publish()
    return generate_latest(p.registry).decode()


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
        )
    )


def test_running_shards_are_read_from_their_metrics_with_rate_progress_and_eta() -> None:
    st = compute(
        [pod(0, "Running", "10.0.0.1"), pod(1, "Running", "10.0.0.2")],
        job(),
        {"10.0.0.1": metrics(0, 150, 40, 2, 0), "10.0.0.2": metrics(1, 150, 58, 0, 0)},
    )
    assert st["phase"] == "Running"
    assert (st["total"], st["succeeded"], st["failed"]) == (300, 98, 2)
    assert st["progress"] == "100/300 (33%)"
    assert st["eta"] == "20m00s"  # 100 lines in 10 minutes, 200 to go
    assert cond(st, "Running")["status"] == "True"
    assert cond(st, "Complete")["status"] == "False"
    assert [s["phase"] for s in st["shardStatus"]] == ["Running", "Running"]


def test_a_shard_still_loading_leaves_the_total_unknown() -> None:
    st = compute(
        [pod(0, "Running", "10.0.0.1"), pod(1, "Pending")],
        job(),
        {"10.0.0.1": metrics(0, 150, 0, 0, 0)},
    )
    assert "total" not in st
    assert "progress" not in st
    assert st["shardStatus"][1] == {
        "index": 1,
        "phase": "Pending",
        "total": None,
        "succeeded": 0,
        "failed": 0,
        "tokensPerSecond": None,
        "restarts": 0,
    }


def test_a_finished_job_is_complete_with_the_counts_of_the_termination_messages() -> None:
    st = compute(
        [
            pod(0, "Succeeded", terminated={"exitCode": 0, "message": summary(0, 150, 147, 3)}),
            pod(1, "Succeeded", terminated={"exitCode": 0, "message": summary(1, 150, 148, 2)}),
        ],
        job(completed="0-1", condition="Complete"),
    )
    assert st["phase"] == "Complete"
    assert (st["total"], st["succeeded"], st["failed"]) == (300, 295, 5)
    assert st["progress"] == "300/300 (100%)"
    assert "eta" not in st
    assert cond(st, "Complete")["message"] == (
        "every line has a record: 295 answered, 5 failed of 300 lines"
    )
    assert cond(st, "Running")["status"] == "False"


def test_a_killed_shard_counts_a_restart_and_keeps_its_last_known_progress() -> None:
    killed = pod(
        0,
        "Failed",
        created="2026-01-01T12:00:00Z",
        terminated={"exitCode": 137, "message": "Loading model...\nKilled"},
    )
    replacement = pod(0, "Pending", created="2026-01-01T12:05:00Z")
    previous = {0: ShardStatus(index=0, phase="Running", total=150, succeeded=60, failed=3)}
    st = compute([killed, replacement, pod(1, "Running", "10.0.0.2")], job(), {}, previous)
    shard0 = st["shardStatus"][0]
    assert (shard0["phase"], shard0["restarts"], shard0["succeeded"]) == ("Pending", 1, 60)
    assert "shard restart(s)" in cond(st, "Running")["message"]


def test_a_failed_job_says_why_in_the_runners_own_words() -> None:
    st = compute(
        [
            pod(
                0,
                "Failed",
                terminated={
                    "exitCode": 3,
                    "message": summary(0, 0, 0, 0, error="output directory /x belongs to job"),
                },
            )
        ],
        job(condition="Failed", reason="PodFailurePolicy", message="Container runner failed"),
    )
    assert st["phase"] == "Failed"
    failed = cond(st, "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert failed["message"].startswith("shard 0: output directory /x belongs to job")


def test_a_crash_without_a_summary_is_reported_with_the_last_log_line() -> None:
    st = compute(
        [pod(0, "Failed", terminated={"exitCode": 1, "message": "Traceback\nValueError: boom\n"})],
        job(condition="Failed", reason="FailedIndexes", message="Job has failed indexes"),
    )
    assert cond(st, "Failed")["message"].startswith("shard 0: exit code 1: ValueError: boom")


def test_status_is_stable_when_nothing_changed_so_it_is_not_rewritten() -> None:
    pods = [
        pod(0, "Succeeded", terminated={"exitCode": 0, "message": summary(0, 1, 1, 0)}),
        pod(1, "Succeeded", terminated={"exitCode": 0, "message": summary(1, 1, 1, 0)}),
    ]
    first = compute(pods, job(completed="0,1", condition="Complete"))
    observed = observe_shards(2, pods, {0, 1}, set(), lambda ip: None, {})
    again = batch_status(
        old=LLMBatchJobStatus.model_validate(first),
        generation=1,
        planned=PLAN,
        shards=2,
        job=job(completed="0,1", condition="Complete"),
        observed=observed,
        at=NOW,
    )
    assert status_json(again) == first


def test_a_refused_job_fails_with_the_reason_and_keeps_the_rest_of_its_status() -> None:
    running = LLMBatchJobStatus(job_name="x", phase="Running")
    st = status_json(refused_status(running, 2, "OutputConflict", "taken"))
    assert st["phase"] == "Failed"
    assert st["jobName"] == "x"
    assert cond(st, "Failed")["reason"] == "OutputConflict"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", set()), ("0", {0}), ("0,2-4", {0, 2, 3, 4}), ("1-2,7", {1, 2, 7})],
)
def test_job_index_lists_are_read_as_sets(text: str, expected: set[int]) -> None:
    assert indexes(text) == expected


def batch(name: str, created: str, path: str, claim: str = "data") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "input": {"configMap": {"name": "c", "key": "k"}},
            "output": {"persistentVolumeClaim": {"claimName": claim, "path": path}},
        },
    }


CONFLICTS = {
    "same-claim-and-path-older-job-wins": ("out/a", "data", "2026-01-01T00:00:00Z", True),
    "same-path-written-differently": ("out/./a/", "data", "2026-01-01T00:00:00Z", True),
    "the-newer-job-does-not-block-the-older": ("out/a", "data", "2026-01-02T00:00:00Z", False),
    "another-path": ("out/b", "data", "2026-01-01T00:00:00Z", False),
    "another-claim": ("out/a", "other", "2026-01-01T00:00:00Z", False),
}


@pytest.mark.parametrize(
    ("path", "claim", "created", "refused"), CONFLICTS.values(), ids=CONFLICTS.keys()
)
def test_two_jobs_may_not_write_the_same_output(
    path: str, claim: str, created: str, refused: bool
) -> None:
    mine = batch("mine", "2026-01-01T12:00:00Z", "out/a")
    other = batch("other", created, path, claim)
    spec = LLMBatchJobSpec.model_validate(mine["spec"])
    found = output_conflict(mine, spec, [mine, other])
    assert (found is not None) == refused
    if found:
        assert "is the output of LLMBatchJob other" in found
