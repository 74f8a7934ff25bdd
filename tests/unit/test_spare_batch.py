"""What the operator does around a Spare LLMBatchJob, without a cluster: it waits, reported, while
the operator has no spare PriorityClass; it names who preempted a shard from the scheduler's
Event; and its metrics count each preemption, line redone and GPU-second once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from batchstatusfakes import PLAN, T1, VICTIM, compute, cond, job, pod
from kubernetes import client as k8s
from prometheus_client import REGISTRY

from llmfleet import metrics_batch
from llmfleet.models import LLMBatchJobStatus
from llmfleet.models.batchjob_status import ShardStatus
from llmfleet.reconcile.llmbatchjob.batchstatus import gpu_seconds
from llmfleet.reconcile.llmbatchjob.preemption import preemptor, preemptor_of
from llmfleet.reconcile.llmbatchjob.spare import SpareClass, Waiting, waiting_status
from llmfleet.reconcile.machinery.events import EventRecorder


class FakeScheduling:
    """SchedulingV1Api's read of one PriorityClass: there, missing, or forbidden."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.read: list[str] = []

    def read_priority_class(self, name: str, **_: Any) -> object:
        self.read.append(name)
        if self.status is not None:
            raise k8s.ApiException(status=self.status)
        return {"metadata": {"name": name}, "value": -100}


SPARE_CLASSES = {
    # operator's spare class, what reading it answers -> why a Spare job waits (None: it starts)
    "configured-and-there": ("llmfleet-spare", None, None),
    "not-configured": ("", None, "SparePriorityClassUnset"),
    "configured-but-missing": ("llmfleet-spare", 404, "SparePriorityClassNotFound"),
    # The Job controller then says what is wrong; the operator does not guess.
    "not-readable-by-the-operator": ("llmfleet-spare", 403, None),
}


@pytest.mark.parametrize(
    ("name", "answer", "reason"), SPARE_CLASSES.values(), ids=SPARE_CLASSES.keys()
)
def test_a_spare_job_starts_only_with_a_spare_class_that_exists(
    name: str, answer: int | None, reason: str | None
) -> None:
    spare = SpareClass(k8s.ApiClient(), name)
    fake = FakeScheduling(answer)
    spare._scheduling = fake  # type: ignore[assignment]
    waiting = spare.missing()
    assert (waiting.reason if waiting else None) == reason
    if waiting is not None:
        assert waiting.message.startswith("spec.priority: Spare")
        assert "priorityClasses" in waiting.message
    assert fake.read == ([name] if name else [])


def test_a_waiting_spare_job_is_pending_and_not_failed() -> None:
    why = Waiting(
        "SparePriorityClassUnset", "spec.priority: Spare needs ... priorityClasses.spare.name ..."
    )
    st = waiting_status(LLMBatchJobStatus(), 3, PLAN, why)
    conditions = {c.type: (c.status, c.reason) for c in st.conditions}
    assert st.phase == "Pending"
    assert conditions["Running"] == ("False", "SparePriorityClassUnset")
    assert conditions["Failed"] == ("False", "SparePriorityClassUnset")
    assert next(c for c in st.conditions if c.type == "Running").message == why.message
    assert st.job_name is None


EVENTS = {
    # the scheduler's Preempted Event on the victim -> who preempted
    "with-the-preemptor-as-related-object": (
        {
            "message": "Preempted by pod 4f1c-9a on node gpu-3",
            "related": {"namespace": "team-a", "name": "llama-engine-7f9c"},
        },
        "pod team-a/llama-engine-7f9c on node gpu-3",
    ),
    "message-only": (
        {"message": "Preempted by pod 4f1c-9a on node gpu-3", "related": {}},
        "pod 4f1c-9a on node gpu-3",
    ),
}


@pytest.mark.parametrize(("event", "who"), EVENTS.values(), ids=EVENTS.keys())
def test_the_preemptor_is_read_from_the_schedulers_event(event: dict[str, Any], who: str) -> None:
    assert preemptor_of(event) == who


def test_the_preemptor_is_looked_up_by_the_victims_uid_and_reason() -> None:
    recorder = EventRecorder(k8s.ApiClient())
    asked: list[str] = []

    def list_namespaced_event(namespace: str, field_selector: str, **_: Any) -> Any:
        asked.append(f"{namespace} {field_selector}")
        related = SimpleNamespace(namespace="team-a", name="llama-engine-7f9c")
        event = SimpleNamespace(message="Preempted by pod 4f1c on node gpu-3", related=related)
        return SimpleNamespace(items=[event])

    recorder._core = SimpleNamespace(list_namespaced_event=list_namespaced_event)  # type: ignore[assignment]
    assert (
        preemptor(recorder, "batch", "uid-victim") == "pod team-a/llama-engine-7f9c on node gpu-3"
    )
    assert asked == ["batch involvedObject.uid=uid-victim,reason=Preempted"]


def counted(name: str, priority: str) -> float:
    value = REGISTRY.get_sample_value(f"{name}_total", {"namespace": "ns-m", "priority": priority})
    return value or 0.0


def test_metrics_count_what_each_status_write_added_once() -> None:
    names = ("llmfleet_batch_preemptions", "llmfleet_batch_lines_redone")
    gpu = "llmfleet_batch_gpu_seconds"
    before = {n: counted(n, "Spare") for n in (*names, gpu)}
    first = LLMBatchJobStatus(preemptions=2, lines_redone=5, gpu_seconds=600)
    later = LLMBatchJobStatus(preemptions=3, lines_redone=5, gpu_seconds=900)
    metrics_batch.count_status_write("ns-m", "Spare", LLMBatchJobStatus(), first)
    metrics_batch.count_status_write("ns-m", "Spare", first, later)
    metrics_batch.count_status_write("ns-m", "Spare", later, later)  # a rewrite adds nothing
    added = {n: counted(n, "Spare") - before[n] for n in (*names, gpu)}
    assert added == {names[0]: 3, names[1]: 5, gpu: 900}
    assert counted(gpu, "Normal") == 0


def test_the_first_status_write_of_a_job_shows_its_counters_at_zero() -> None:
    """A preemption later is then an increase the dashboard's row sees, not a new series."""
    labels = {"namespace": "ns-fresh", "priority": "Spare"}
    status = LLMBatchJobStatus(succeeded=1)
    metrics_batch.count_status_write("ns-fresh", "Spare", LLMBatchJobStatus(), status)
    for name in ("llmfleet_batch_preemptions", "llmfleet_batch_lines_redone"):
        assert REGISTRY.get_sample_value(f"{name}_total", labels) == 0.0


def test_a_preempted_shard_stays_preempted_after_kubernetes_deleted_its_pod() -> None:
    """The kubelet deletes a preempted pod once it has stopped; the Job's replacement waits for a
    GPU. Status remembers the preemption and who made it until the replacement runs."""
    by = "pod team-a/llama-engine-7f9c on node gpu-3"
    named = {VICTIM["metadata"]["uid"]: by}
    replacement = pod(0, "Pending", None, T1)
    shard1 = pod(1, "Running", "10.0.0.2")
    seen = compute([VICTIM, replacement, shard1], job(), {}, preemptors=named)
    assert seen["shardStatus"][0]["preemptedBy"] == by
    previous = {s["index"]: ShardStatus.model_validate(s) for s in seen["shardStatus"]}

    gone = compute([replacement, shard1], job(), {}, previous)
    assert (gone["phase"], gone["preemptions"]) == ("Preempted", 1)
    preempted = cond(gone, "Preempted")
    assert (preempted["status"], preempted["reason"]) == ("True", "ShardsPreempted")
    assert f"shard 0 by {by};" in preempted["message"]

    runs = pod(0, "Running", "10.0.0.1", T1)
    previous = {s["index"]: ShardStatus.model_validate(s) for s in gone["shardStatus"]}
    resumed = compute([runs, shard1], job(), {}, previous)
    assert (resumed["phase"], cond(resumed, "Preempted")["reason"]) == ("Running", "Resumed")
    assert "preemptedBy" not in resumed["shardStatus"][0]


def held(start: datetime, end: datetime | None = None) -> dict[str, Any]:
    """A shard pod that started at `start` and, with `end`, whose runner ended then."""
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    state = {"terminated": {"finishedAt": end.strftime(stamp)}} if end else {"running": {}}
    return {
        "status": {
            "phase": "Failed" if end else "Running",
            "startTime": start.strftime(stamp),
            "containerStatuses": [{"name": "runner", "state": state}],
        }
    }


def test_gpu_seconds_keep_a_preempted_pod_after_kubernetes_deleted_it() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    victim, replacement = held(t0, t0 + timedelta(seconds=60)), held(t0 + timedelta(seconds=70))
    at = t0 + timedelta(seconds=50)
    first = LLMBatchJobStatus(**gpu_seconds(LLMBatchJobStatus(), [victim], 2, at))
    assert (first.gpu_seconds, first.gpu_seconds_at) == (100, at)  # 2 GPUs for 50 s
    # The victim ended at 60 s and is gone; the replacement has run 30 s at 100 s.
    later = gpu_seconds(first, [replacement], 2, t0 + timedelta(seconds=100))
    assert later["gpu_seconds"] == 100 + 2 * 30  # the victim's last 10 s went with it
    later = gpu_seconds(first, [victim, replacement], 2, t0 + timedelta(seconds=100))
    assert later["gpu_seconds"] == 100 + 2 * (10 + 30)
    # Nothing holds a GPU since the last count: nothing to write.
    assert gpu_seconds(first, [], 2, t0 + timedelta(seconds=100)) == {
        "gpu_seconds": 100,
        "gpu_seconds_at": at,
    }
