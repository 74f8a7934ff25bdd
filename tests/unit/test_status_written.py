"""The status JSON each reconcile sends the API server, pinned to the letter for representative
cases: end-to-end tests and users' tools read it, so a change here must be deliberate. Whole
reconciles run against an in-memory API server (fake_api). Only the clock varies between runs:
the moment a condition changed shows as NOW, and a running job's ETA is checked for its form."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from fake_api import FakeApi, install
from kubernetes import client as k8s
from test_batch_render import TINY

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.reconcile.batchjob import BatchJobController
from llmfleet.reconcile.controller import Controller

NS = "ml"
EARLIER = "2026-01-01T00:00:00Z"  # when the conditions in stored status last changed
NOW = "NOW"
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
CHAT_SPEC: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}
CHAT_REASON = plan(LLMDeploymentSpec.model_validate(CHAT_SPEC)).reason
CHAT_PLAN = {
    "strategy": "MultiPod",
    "replicas": 2,
    "gpusPerReplica": 1,
    "tensorParallelSize": 1,
    "kvCacheTokensPerReplica": 446784,
    "maxConcurrentSequences": 512,
}
CHAT_PREDICTED = {
    "promptTokens": 512,
    "outputTokens": 256,
    "concurrency": 512,
    "outputTokensPerSecond": 9619.2,
    "totalTokensPerSecond": 28857.7,
    "outputTokensPerSecondPerGPU": 9619.2,
    "ttftMillis": 19.4,
    "itlMillis": 30.13,
    "itlMillisBatch1": 6.63,
    "maxConcurrencyWithinSlo": None,
    "calibration": "NVIDIA H100 80GB HBM3, vLLM 0.26.0, 2026-11-23",
}
UNVERIFIED = (
    "no ready engine of the current layout has reported its KV cache yet (vllm:cache_config_info)"
)


def normalised(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with every condition's lastTransitionTime written by this run shown as NOW."""
    body = copy.deepcopy(body)
    for c in body.get("status", {}).get("conditions") or []:
        stamp = c.get("lastTransitionTime")
        assert isinstance(stamp, str)
        assert _STAMP.match(stamp), stamp
        if stamp != EARLIER:
            c["lastTransitionTime"] = NOW
    return body


def cond(
    ctype: str, status: str, reason: str, message: str, generation: int = 1, at: str = NOW
) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": at,
    }


def age_conditions(fake: FakeApi, kind_key: tuple[str, str, str, str]) -> None:
    """Make the stored conditions look written long ago, so kept ones are told from new ones."""
    for c in fake.get(*kind_key)["status"]["conditions"]:
        c["lastTransitionTime"] = EARLIER


def reconcile_later(fake: FakeApi, controller: Any, stored: tuple[str, str, str, str]) -> None:
    """Reconcile `stored` again, its conditions now looking old and the Events so far read."""
    age_conditions(fake, stored)
    fake.events.clear()
    controller.reconcile_by_name(NS, stored[3])


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """The in-memory API server; not `api`, the cluster tests' fixture of a real one."""
    return install(monkeypatch)


# --- LLMDeployment -------------------------------------------------------------------------------

CHAT = ("llmfleet.dev/v1alpha1", "LLMDeployment", NS, "chat")


def llmdeployment(
    fake: FakeApi, spec: dict[str, Any], name: str = "chat", generation: int = 1
) -> None:
    fake.put(
        {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMDeployment",
            "metadata": {"name": name, "namespace": NS, "generation": generation},
            "spec": spec,
        }
    )


def written(fake: FakeApi, count: int) -> list[dict[str, Any]]:
    assert len(fake.status_patches) == count, fake.status_patches
    return [normalised(body) for _, _, body in fake.status_patches]


def test_a_new_llmdeployment_is_progressing(fake: FakeApi) -> None:
    llmdeployment(fake, CHAT_SPEC)
    Controller(k8s.ApiClient()).reconcile_by_name(NS, "chat")
    (body,) = written(fake, 1)
    assert body == {
        "status": {
            "observedGeneration": 1,
            "conditions": [
                cond("Available", "False", "NoEngineReady", "0 of 2 vLLM pods ready"),
                cond("Degraded", "False", "AsPlanned", "no problem observed"),
                cond("PlanVerified", "Unknown", "NoEngineReported", UNVERIFIED),
                cond("Planned", "True", "LayoutPlanned", CHAT_REASON),
                cond("Progressing", "True", "RollingOut", "0 of 2 pods ready, 0 of 0 updated"),
                cond("ScalingLimited", "False", "Schedulable", "every pod found a node"),
            ],
            "plan": CHAT_PLAN,
            "predicted": CHAT_PREDICTED,
            "replicas": 2,
            "currentReplicas": 0,
            "readyReplicas": 0,
            "gpus": 2,
            "endpoint": "http://chat-router.ml.svc:8000/v1",
        }
    }
    assert [e[:2] for e in fake.events] == [("Normal", "Planned"), ("Normal", "Applied")]


def ready(fake: FakeApi) -> None:
    """The engine Deployment's two pods ready, the HPA reading its metric."""
    engine = fake.get("apps/v1", "Deployment", NS, "chat-tp1")
    engine["status"] = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}
    fake.get("autoscaling/v2", "HorizontalPodAutoscaler", NS, "chat")["status"] = {
        "desiredReplicas": 2,
        "conditions": [{"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}],
    }


def test_an_llmdeployment_whose_pods_are_ready_is_available(
    fake: FakeApi,
) -> None:
    llmdeployment(fake, CHAT_SPEC)
    controller = Controller(k8s.ApiClient())
    controller.reconcile_by_name(NS, "chat")
    ready(fake)
    reconcile_later(fake, controller, CHAT)
    _, body = written(fake, 2)
    assert body == {
        "status": {
            "observedGeneration": 1,
            "conditions": [
                cond("Available", "True", "EnginesReady", "2 of 2 vLLM pods ready"),
                cond("Degraded", "False", "AsPlanned", "no problem observed", at=EARLIER),
                cond("PlanVerified", "Unknown", "NoEngineReported", UNVERIFIED, at=EARLIER),
                cond("Planned", "True", "LayoutPlanned", CHAT_REASON, at=EARLIER),
                cond("Progressing", "False", "Stable", "all 2 pods ready and up to date"),
                cond(
                    "ScalingLimited", "False", "Schedulable", "every pod found a node", at=EARLIER
                ),
            ],
            "plan": CHAT_PLAN,
            "predicted": CHAT_PREDICTED,
            "replicas": 2,
            "currentReplicas": 2,
            "readyReplicas": 2,
            "gpus": 2,
            "endpoint": "http://chat-router.ml.svc:8000/v1",
        }
    }
    assert fake.events == []


def available_chat(fake: FakeApi) -> Controller:
    """A controller that has reconciled chat until its pods are ready."""
    llmdeployment(fake, CHAT_SPEC)
    controller = Controller(k8s.ApiClient())
    controller.reconcile_by_name(NS, "chat")
    ready(fake)
    controller.reconcile_by_name(NS, "chat")
    return controller


def test_an_idle_resync_writes_nothing(fake: FakeApi) -> None:
    controller = available_chat(fake)
    fake.events.clear()
    fake.applied.clear()
    controller.reconcile_by_name(NS, "chat")
    written(fake, 2)
    assert (fake.events, fake.applied) == ([], [])


def test_an_unplannable_spec_is_refused_and_the_last_good_status_kept(fake: FakeApi) -> None:
    controller = available_chat(fake)
    stored = fake.get(*CHAT)
    stored["spec"] = {**CHAT_SPEC, "gpus": {**H100, "count": 1, "memoryGiB": 16}}
    stored["metadata"]["generation"] = 2
    reconcile_later(fake, controller, CHAT)
    *_, body = written(fake, 3)
    message = body["status"]["conditions"][3]["message"]
    assert message.startswith("spec.gpus.count")
    assert body == {
        "status": {
            "observedGeneration": 2,
            "conditions": [
                cond("Available", "True", "EnginesReady", "2 of 2 vLLM pods ready", at=EARLIER),
                cond("Degraded", "False", "AsPlanned", "no problem observed", at=EARLIER),
                cond("PlanVerified", "Unknown", "NoEngineReported", UNVERIFIED, at=EARLIER),
                cond("Planned", "False", "PlanningFailed", message, generation=2),
                cond(
                    "Progressing",
                    "False",
                    "Stable",
                    "all 2 pods ready and up to date",
                    at=EARLIER,
                ),
                cond(
                    "ScalingLimited", "False", "Schedulable", "every pod found a node", at=EARLIER
                ),
            ],
            # The rest as the API server holds it (a merge patch stores no nulls).
            "plan": CHAT_PLAN,
            "predicted": {k: v for k, v in CHAT_PREDICTED.items() if v is not None},
            "replicas": 2,
            "currentReplicas": 2,
            "readyReplicas": 2,
            "gpus": 2,
            "endpoint": "http://chat-router.ml.svc:8000/v1",
        }
    }
    assert fake.events == [("Warning", "PlanningFailed", message)]


def test_an_invalid_new_spec_is_refused_naming_the_field(fake: FakeApi) -> None:
    llmdeployment(fake, {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": {}})
    Controller(k8s.ApiClient()).reconcile_by_name(NS, "chat")
    (body,) = written(fake, 1)
    message = body["status"]["conditions"][0]["message"]
    assert message.startswith("spec.gpus")
    assert body == {
        "status": {
            "observedGeneration": 1,
            "conditions": [cond("Planned", "False", "InvalidSpec", message)],
        }
    }
    assert fake.events == [("Warning", "InvalidSpec", message)]
    assert fake.applied == []


# --- LLMBatchJob ---------------------------------------------------------------------------------

BATCH_SPEC: dict[str, Any] = {
    "model": {"name": "/models/tiny-llama", "architecture": TINY},
    "engine": {"maxModelLen": 512},
    "shards": 2,
    "input": {"configMap": {"name": "prompts", "key": "prompts.jsonl"}},
    "output": {"persistentVolumeClaim": {"claimName": "results", "path": "run-1"}},
}
TINY_PLAN = {
    "strategy": "SinglePod",
    "replicas": 1,
    "gpusPerReplica": 0,
    "tensorParallelSize": 1,
    "kvCacheTokensPerReplica": 8388608,
    "maxConcurrentSequences": 512,
}
BATCH = ("llmfleet.dev/v1alpha1", "LLMBatchJob", NS, "tiny")
JOB = ("batch/v1", "Job", NS, "tiny")
STARTED = "2026-01-01T12:00:00Z"
# What the running job's status had and a finished one has not is deleted (merge patch).
GONE = {"tokensPerSecond": None, "eta": None}
SAME_JOB = {"plan": TINY_PLAN, "jobName": "tiny", "shards": 2}


def batchjob(fake: FakeApi, spec: dict[str, Any], name: str = "tiny", created: str = "") -> None:
    fake.put(
        {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMBatchJob",
            "metadata": {
                "name": name,
                "namespace": NS,
                "generation": 1,
                "creationTimestamp": created or "2026-01-01T11:00:00Z",
            },
            "spec": spec,
        }
    )


def shard(
    index: int,
    phase: str,
    total: int | None,
    succeeded: int,
    failed: int,
    tokens_per_second: float | None,
    restarts: int,
) -> dict[str, Any]:
    return {
        "index": index,
        "phase": phase,
        "total": total,
        "succeeded": succeeded,
        "failed": failed,
        "tokensPerSecond": tokens_per_second,
        "restarts": restarts,
    }


def shard_pod(
    fake: FakeApi, index: int, phase: str, ip: str = "", terminated: dict[str, Any] | None = None
) -> None:
    state = {"terminated": terminated} if terminated else {"running": {}}
    fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"tiny-{index}-abcde",
                "namespace": NS,
                "labels": {
                    "llmfleet.dev/batchjob": "tiny",
                    "app.kubernetes.io/managed-by": "llmfleet",
                },
                "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                "creationTimestamp": "2026-01-01T12:00:05Z",
            },
            "status": {
                "phase": phase,
                **({"podIP": ip} if ip else {}),
                "containerStatuses": [{"name": "runner", "state": state}],
            },
        }
    )


def shard_metrics(shard: int, total: int, succeeded: int, failed: int, rate: float) -> str:
    return (
        f'llmfleet_batch_shard_info{{shard="{shard}",shards="2"}} 1.0\n'
        f'llmfleet_batch_shard_lines{{state="total"}} {total}.0\n'
        f'llmfleet_batch_shard_lines{{state="succeeded"}} {succeeded}.0\n'
        f'llmfleet_batch_shard_lines{{state="failed"}} {failed}.0\n'
        f'llmfleet_batch_shard_tokens{{kind="prompt"}} {20 * succeeded}.0\n'
        f'llmfleet_batch_shard_tokens{{kind="completion"}} {10 * succeeded}.0\n'
        f"llmfleet_batch_shard_tokens_per_second {rate}\n"
    )


def summary(shard: int, total: int, succeeded: int, failed: int, error: str = "") -> str:
    return (
        f'{{"shard":{shard},"shards":2,"total":{total},"succeeded":{succeeded},'
        f'"failed":{failed},"promptTokens":{20 * succeeded},'
        f'"completionTokens":{10 * succeeded},"tokensPerSecond":0.0'
        + (f',"error":"{error}"' if error else "")
        + "}"
    )


PAGES = {
    "10.0.0.1": shard_metrics(0, 150, 40, 2, 12.34),
    "10.0.0.2": shard_metrics(1, 150, 58, 0, 20.0),
}


def running_job(fake: FakeApi) -> BatchJobController:
    batchjob(fake, BATCH_SPEC)
    controller = BatchJobController(k8s.ApiClient(), scraper=PAGES.get)
    controller.reconcile_by_name(NS, "tiny")  # creates the Job
    controller.reconcile_by_name(NS, "tiny")  # a poll before any shard started writes nothing
    assert len(fake.status_patches) == 1
    fake.get(*JOB)["status"] = {"startTime": STARTED, "active": 2}
    shard_pod(fake, 0, "Running", "10.0.0.1")
    shard_pod(fake, 1, "Running", "10.0.0.2")
    return controller


def test_a_running_batch_job_shows_its_shards_progress(fake: FakeApi) -> None:
    controller = running_job(fake)
    reconcile_later(fake, controller, BATCH)
    first, body = written(fake, 2)
    assert first == {
        "status": {
            "observedGeneration": 1,
            "conditions": [
                cond("Complete", "False", "InProgress", "0 answered, 0 failed"),
                cond("Failed", "False", "InProgress", "no shard failed for good"),
                cond(
                    "Running",
                    "False",
                    "ShardsStarting",
                    "0 of 2 shards running: 0 answered, 0 failed",
                ),
            ],
            "phase": "Pending",
            **SAME_JOB,
            "succeeded": 0,
            "failed": 0,
            "promptTokens": 0,
            "completionTokens": 0,
            "shardStatus": [shard(i, "Pending", None, 0, 0, None, 0) for i in (0, 1)],
        }
    }
    eta = body["status"]["eta"]
    assert re.fullmatch(r"\d+h\d\dm|\d+m\d\ds|\d+s", eta)
    counts = "98 answered, 2 failed of 300 lines"
    assert body == {
        "status": {
            "observedGeneration": 1,
            "conditions": [
                cond("Complete", "False", "InProgress", counts, at=EARLIER),
                cond("Failed", "False", "InProgress", "no shard failed for good", at=EARLIER),
                cond("Running", "True", "ShardsRunning", f"2 of 2 shards running: {counts}"),
            ],
            "phase": "Running",
            **SAME_JOB,
            "total": 300,
            "succeeded": 98,
            "failed": 2,
            "progress": "100/300 (33%)",
            "promptTokens": 1960,
            "completionTokens": 980,
            "tokensPerSecond": 32.3,
            "eta": eta,
            "startTime": STARTED,
            "shardStatus": [
                shard(0, "Running", 150, 40, 2, 12.3, 0),
                shard(1, "Running", 150, 58, 0, 20.0, 0),
            ],
        }
    }
    assert fake.events == []


def test_a_batch_job_that_succeeded_is_complete(fake: FakeApi) -> None:
    controller = running_job(fake)
    controller.reconcile_by_name(NS, "tiny")
    fake.get(*JOB)["status"] = {
        "startTime": STARTED,
        "completionTime": "2026-01-01T12:30:00Z",
        "completedIndexes": "0-1",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    for i, (succeeded, failed) in enumerate(((148, 2), (150, 0))):
        done = {"exitCode": 0, "message": summary(i, 150, succeeded, failed)}
        shard_pod(fake, i, "Succeeded", terminated=done)
    reconcile_later(fake, controller, BATCH)
    *_, body = written(fake, 3)
    counts = "298 answered, 2 failed of 300 lines"
    assert body == {
        "status": {
            **GONE,
            "observedGeneration": 1,
            "conditions": [
                cond("Complete", "True", "AllLinesAnswered", f"every line has a record: {counts}"),
                cond("Failed", "False", "Complete", "no shard failed", at=EARLIER),
                cond("Running", "False", "Finished", "the job completed"),
            ],
            "phase": "Complete",
            **SAME_JOB,
            "total": 300,
            "succeeded": 298,
            "failed": 2,
            "progress": "300/300 (100%)",
            "promptTokens": 5960,
            "completionTokens": 2980,
            "startTime": STARTED,
            "completionTime": "2026-01-01T12:30:00Z",
            "shardStatus": [
                shard(0, "Succeeded", 150, 148, 2, None, 0),
                shard(1, "Succeeded", 150, 150, 0, None, 0),
            ],
        }
    }
    assert fake.events == [("Normal", "Complete", f"every line has a record: {counts}")]
    # Once complete, the Job is never created again and nothing is rewritten.
    controller.reconcile_by_name(NS, "tiny")
    written(fake, 3)


def test_a_batch_job_that_failed_says_why(fake: FakeApi) -> None:
    controller = running_job(fake)
    controller.reconcile_by_name(NS, "tiny")
    fake.get(*JOB)["status"] = {
        "startTime": STARTED,
        "failedIndexes": "0",
        "completedIndexes": "1",
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "FailedIndexes",
                "message": "Job has failed indexes",
                "lastTransitionTime": "2026-01-01T12:20:00Z",
            }
        ],
    }
    crash = {"exitCode": 1, "message": "Loading model...\nRuntimeError: out of memory\n"}
    shard_pod(fake, 0, "Failed", terminated=crash)
    shard_pod(fake, 1, "Succeeded", terminated={"exitCode": 0, "message": summary(1, 150, 150, 0)})
    reconcile_later(fake, controller, BATCH)
    *_, body = written(fake, 3)
    why = "shard 0: exit code 1: RuntimeError: out of memory (190 answered, 2 failed of 300 lines)"
    assert body == {
        "status": {
            **GONE,
            "observedGeneration": 1,
            "conditions": [
                cond("Complete", "False", "Failed", "the job failed", at=EARLIER),
                cond("Failed", "True", "FailedIndexes", why),
                cond("Running", "False", "Finished", "the job failed"),
            ],
            "phase": "Failed",
            **SAME_JOB,
            "total": 300,
            "succeeded": 190,
            "failed": 2,
            "progress": "192/300 (64%)",
            "promptTokens": 3000,
            "completionTokens": 1500,
            "startTime": STARTED,
            "completionTime": "2026-01-01T12:20:00Z",
            "shardStatus": [
                shard(0, "Failed", 150, 40, 2, None, 1),
                shard(1, "Succeeded", 150, 150, 0, None, 0),
            ],
        }
    }
    assert fake.events == [("Warning", "Failed", why)]


def test_a_batch_job_writing_another_jobs_output_is_refused(fake: FakeApi) -> None:
    batchjob(fake, BATCH_SPEC, name="older", created="2026-01-01T10:00:00Z")
    batchjob(fake, BATCH_SPEC)
    BatchJobController(k8s.ApiClient()).reconcile_by_name(NS, "tiny")
    (body,) = written(fake, 1)
    message = (
        "spec.output.persistentVolumeClaim: claim results path run-1 is the output of "
        "LLMBatchJob older; choose another path"
    )
    assert body == {
        "status": {
            "observedGeneration": 1,
            "phase": "Failed",
            "conditions": [
                cond("Complete", "False", "OutputConflict", "the job cannot run as specified"),
                cond("Failed", "True", "OutputConflict", message),
                cond("Running", "False", "OutputConflict", "the job cannot run as specified"),
            ],
        }
    }
    assert fake.events == [("Warning", "OutputConflict", message)]
    assert fake.applied == []
