"""LLMBatchJob status from what the cluster shows: shards' pods, their metrics and termination
messages, and the Job's conditions. Pure functions, no cluster."""

from __future__ import annotations

from typing import Any

import pytest
from batchstatusfakes import (
    NOW,
    PLAN,
    SCHEDULER_SAID,
    STOPPED,
    T0,
    T1,
    VICTIM,
    compute,
    cond,
    job,
    pod,
    summary,
)
from prometheus_client import generate_latest

from llmfleet.batch.progress import Progress
from llmfleet.models import LLMBatchJobSpec, LLMBatchJobStatus, ShardStatus
from llmfleet.models.status import status_json
from llmfleet.reconcile.llmbatchjob.batchstatus import (
    batch_status,
    indexes,
    observe_shards,
    output_conflict,
    refused_status,
)
from llmfleet.shard_report import ShardReport


def metrics(shard: int, total: int, succeeded: int, failed: int, rate: float) -> str:
    p = Progress(shard=shard, shards=2, total=total, succeeded=succeeded, failed=failed)
    p.completion_tokens = 10 * succeeded
    p.engine_started = 0.0
    p.run_completion_tokens = int(rate)  # with engine_started 0, rate is per process uptime
    p.publish()
    return generate_latest(p.registry).decode()


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
    assert st["runningShards"] == 2


@pytest.mark.parametrize(
    ("pods", "running"),
    [
        ([], 0),
        ([("Pending", "")], 0),
        ([("Running", "10.0.0.1"), ("Pending", "")], 1),
    ],
    ids=["none-started", "waiting-for-a-gpu", "one-of-two"],
)
def test_running_shards_counts_the_shards_that_hold_a_pod_now(
    pods: list[tuple[str, str]], running: int
) -> None:
    st = compute([pod(i, phase, ip) for i, (phase, ip) in enumerate(pods)], job())

    assert st.get("runningShards", 0) == running
    assert cond(st, "Running")["message"].startswith(f"{running} of 2 shards running")


def test_a_shard_still_loading_leaves_the_total_unknown_and_progress_estimated() -> None:
    st = compute(
        [pod(0, "Running", "10.0.0.1"), pod(1, "Pending")],
        job(),
        {"10.0.0.1": metrics(0, 150, 30, 0, 0)},
    )
    assert "total" not in st
    assert st["progress"] == "30/~300 (10%)"  # the other shard's share taken as this one's
    assert st["eta"] == "1h30m"  # 30 lines in 10 minutes, about 270 to go
    assert st["shardStatus"][1] == {
        "index": 1,
        "phase": "Pending",
        "total": None,
        "succeeded": 0,
        "failed": 0,
        "tokensPerSecond": None,
        "restarts": 0,
        "preemptions": 0,
        "linesRedone": 0,
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


# --- preemption --------------------------------------------------------------------------------

PREEMPTIONS = {
    # shard 0's pods, oldest first -> shard 0 phase, restarts, preemptions; job phase; Preempted
    "preempted-pod-still-draining": (
        [pod(0, "Running", "10.0.0.1", T0, disrupted="PreemptionByScheduler")],
        ("Preempted", 0, 1),
        ("Preempted", "True", "ShardsPreempted"),
    ),
    "replacement-waits-for-a-gpu": (
        [VICTIM, pod(0, "Pending", None, T1)],
        ("Preempted", 0, 1),
        ("Preempted", "True", "ShardsPreempted"),
    ),
    "replacement-runs-again": (
        [VICTIM, pod(0, "Running", "10.0.0.1", T1)],
        ("Running", 0, 1),
        ("Running", "False", "Resumed"),
    ),
    "evicted-by-a-drain-is-no-preemption-and-no-failure": (
        [
            pod(0, "Failed", None, T0, STOPPED, disrupted="EvictionByEvictionAPI"),
            pod(0, "Pending", None, T1),
        ],
        ("Pending", 0, 0),
        ("Running", "False", "NotPreempted"),
    ),
    "a-crash-is-a-restart": (
        [pod(0, "Failed", None, T0, {"exitCode": 1}), pod(0, "Pending", None, T1)],
        ("Pending", 1, 0),
        ("Running", "False", "NotPreempted"),
    ),
}


@pytest.mark.parametrize(
    ("shard0", "expected_shard", "expected_job"), PREEMPTIONS.values(), ids=PREEMPTIONS.keys()
)
def test_a_preempted_shard_is_preempted_not_failed_until_it_runs_again(
    shard0: list[dict[str, Any]],
    expected_shard: tuple[str, int, int],
    expected_job: tuple[str, str, str],
) -> None:
    st = compute([*shard0, pod(1, "Running", "10.0.0.2")], job(), {})
    s0 = st["shardStatus"][0]
    assert (s0["phase"], s0["restarts"], s0["preemptions"]) == expected_shard
    preempted = cond(st, "Preempted")
    assert (st["phase"], preempted["status"], preempted["reason"]) == expected_job
    assert st["preemptions"] == expected_shard[2]
    assert cond(st, "Running")["status"] == "True"  # shard 1 runs throughout


def test_the_preempted_condition_names_the_preemptor_where_its_event_was_read() -> None:
    victims = [VICTIM, pod(1, "Running", "10.0.0.2", T0, disrupted="PreemptionByScheduler")]
    named = {"uid-j-0-0000": "pod team-a/llama-engine-7f9c on node gpu-3"}
    st = compute(victims, job(), {}, preemptors=named)
    assert st["phase"] == "Preempted"
    message = cond(st, "Preempted")["message"]
    assert message.startswith("2 of 2 shard(s) preempted: ")
    assert "shard 0 by pod team-a/llama-engine-7f9c on node gpu-3" in message
    assert f"shard 1 by {SCHEDULER_SAID}" in message  # its Event was not (yet) read
    running = cond(st, "Running")
    assert (running["status"], running["reason"]) == ("False", "ShardsPreempted")
    assert running["message"].startswith("0 of 2 shards running, 2 preempted")


def test_preemptions_are_not_forgotten_when_kubernetes_deletes_old_pods() -> None:
    previous = {0: ShardStatus(index=0, phase="Running", preemptions=3)}
    st = compute(
        [pod(0, "Running", "10.0.0.1"), pod(1, "Running", "10.0.0.2")], job(), {}, previous
    )
    assert (st["shardStatus"][0]["preemptions"], st["preemptions"]) == (3, 3)


def test_lines_redone_add_up_over_the_shards_reports() -> None:
    redone = [ShardReport(i, 2, 150, 150, 0, redone=n).to_json() for i, n in enumerate((4, 1))]
    st = compute(
        [
            pod(0, "Succeeded", terminated={"exitCode": 0, "message": redone[0]}),
            pod(1, "Succeeded", terminated={"exitCode": 0, "message": redone[1]}),
        ],
        job(completed="0-1", condition="Complete"),
    )
    assert [s["linesRedone"] for s in st["shardStatus"]] == [4, 1]
    assert st["linesRedone"] == 5
    assert cond(st, "Preempted")["reason"] == "Finished"
