"""A batch job's shards that wait for a GPU, read through the same steps as the operator's reconcile
(pods -> blockers -> the job's causes -> status -> the Warning Events to post): for a Spare job a
shard beyond the free GPUs is what spare means and reads as before, no cause and no Event; for a
Normal job it is a cause, named in Running and announced once, not on every status write."""

from __future__ import annotations

from typing import Any

import pytest
from batchstatusfakes import NOW, PLAN, job, pod
from localcluster.metricsstack.load import TINY_ARCHITECTURE

from llmfleet.models import LLMBatchJobStatus
from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.planner import plan
from llmfleet.reconcile.llmbatchjob.batchstatus import batch_status, observe_shards
from llmfleet.reconcile.llmbatchjob.spare import causes_of
from llmfleet.reconcile.machinery.causes import newly_blocked
from llmfleet.reconcile.machinery.pod_blockers import blockers
from llmfleet.reconcile.machinery.references import batch_references

# What kube-scheduler writes on a shard no node has a GPU free for (the spare e2e test's words).
NO_FREE_GPU = (
    "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/4 nodes are available: 1 No preemption victims found for "
    "incoming pod, 3 Preemption is not helpful for scheduling."
)


def spec(priority: str) -> LLMBatchJobSpec:
    return LLMBatchJobSpec.model_validate(
        {
            "model": {"name": "org/tiny", "architecture": TINY_ARCHITECTURE},
            "gpus": {"count": 2, "memoryGiB": 16, "perNode": 4},
            "engine": {"maxModelLen": 512},
            "input": {"persistentVolumeClaim": {"claimName": "data", "path": "in.jsonl"}},
            "output": {"persistentVolumeClaim": {"claimName": "data", "path": "out"}},
            "priority": priority,
        }
    )


def waiting_for_a_gpu(index: int) -> dict[str, Any]:
    shard = pod(index, "Pending", created=f"2026-01-01T12:0{index}:00Z")
    shard["status"]["containerStatuses"] = []
    shard["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": NO_FREE_GPU,
        }
    ]
    return shard


def running_shard(index: int) -> dict[str, Any]:
    return pod(index, "Running", created=f"2026-01-01T12:0{index}:00Z")


def reconcile(
    priority: str, pods: list[dict[str, Any]], old: LLMBatchJobStatus
) -> tuple[LLMBatchJobStatus, list[str]]:
    """One reconcile as BatchJobController.run does it: the status it writes and the reasons of
    the Warning Events it posts."""
    job_spec = spec(priority)
    refs = batch_references(job_spec, plan(job_spec.deployment_spec()))
    blocked = causes_of(blockers(pods, refs, {}), priority)
    new = batch_status(
        old=old,
        generation=1,
        planned=PLAN,
        shards=2,
        job=job(),
        observed=observe_shards(2, pods, set(), set(), lambda _ip: None, {}),
        at=NOW,
        blockers=blocked,
        pods=pods,
    )
    before = next((c.message for c in old.conditions if c.type == "Running"), "")
    return new, [b.reason for b in newly_blocked(before, blocked)]


def running(status: LLMBatchJobStatus) -> tuple[str, str, str]:
    c = next(c for c in status.conditions if c.type == "Running")
    return c.status, c.reason, c.message


# priority, shards running (the rest wait for a GPU) -> Running's status and reason, and whether
# its message names the GPU shortage
WAITS = {
    "spare-one-runs": ("Spare", 1, ("True", "ShardsRunning"), False),
    "spare-none-runs": ("Spare", 0, ("False", "ShardsStarting"), False),
    "normal-one-runs": ("Normal", 1, ("True", "ShardsRunning"), True),
    "normal-none-runs": ("Normal", 0, ("False", "InsufficientGPUs"), True),
}


@pytest.mark.parametrize(
    ("priority", "runs", "want", "named"), list(WAITS.values()), ids=list(WAITS)
)
def test_a_shard_waiting_for_a_gpu_is_a_cause_only_for_a_normal_job(
    priority: str, runs: int, want: tuple[str, str], named: bool
) -> None:
    pods = [running_shard(i) if i < runs else waiting_for_a_gpu(i) for i in range(2)]
    status, events = reconcile(priority, pods, LLMBatchJobStatus())
    state, reason, message = running(status)
    assert (state, reason) == want
    assert ("Insufficient nvidia.com/gpu" in message) is named
    assert events == (["InsufficientGPUs"] if named else [])


@pytest.mark.parametrize("priority", ["Spare", "Normal"])
def test_a_waiting_shard_is_announced_at_most_once_while_the_job_runs(
    priority: str,
) -> None:
    pods = [running_shard(0), waiting_for_a_gpu(1)]
    posted = []
    status = LLMBatchJobStatus()
    # Every write of a running job's status (its counts and GPU-seconds move): the same waiting
    # shard each time.
    for _ in range(3):
        status, events = reconcile(priority, pods, status)
        posted += events
    assert posted == ([] if priority == "Spare" else ["InsufficientGPUs"])
