"""LLMBatchJob against the API server alone: what admission refuses, and what the operator
decides before any pod runs (no pod ever runs here; tests/e2e/test_batchjob.py runs them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.operator_process import Operator
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import batch_job, cond, create, events, status

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.batchjob import PLURAL

pytestmark = pytest.mark.cluster


REFUSED = {
    "no-input": (lambda s: s.pop("input"), "spec.input: Required value"),
    "zero-shards": (lambda s: s.update(shards=0), "spec.shards: Invalid value: 0"),
    "input-both-claim-and-configmap": (
        lambda s: s["input"].update(configMap={"name": "c", "key": "k"}),
        "set exactly one of persistentVolumeClaim or configMap",
    ),
    "output-path-leaves-the-claim": (
        lambda s: s["output"]["persistentVolumeClaim"].update(path="../elsewhere"),
        "path must be relative to the claim's root and must not contain '..'",
    ),
    "engine-lora": (
        lambda s: s.setdefault("engine", {}).update(lora={}),
        "engine.lora is for an LLMDeployment's spec.adapters",
    ),
    "unknown-priority": (
        lambda s: s.update(priority="Low"),
        'spec.priority: Unsupported value: "Low": supported values: "Normal", "Spare"',
    ),
    "parallelism-above-shards": (
        lambda s: s.update(shards=2, parallelism=3),
        'spec.parallelism: Invalid value: "object": parallelism must be at most shards',
    ),
    "grace-period-too-short": (
        lambda s: s.update(terminationGracePeriodSeconds=5),
        "spec.terminationGracePeriodSeconds: Invalid value: 5",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_the_api_server_refuses_a_bad_spec_with_a_clear_message(
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
    mutate: Callable[[dict[str, Any]], Any],
    message: str,
) -> None:
    body = batch_job("bad")
    mutate(body["spec"])
    with pytest.raises(ApiException) as refused:
        create(api, namespace, body)
    assert refused.value.status == 422
    assert message in json.loads(refused.value.body)["message"]


def test_the_spec_cannot_change_after_creation(
    api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    body = batch_job("fixed", gpus={"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"})
    create(api, namespace, body)
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "fixed", {"spec": {"shards": 3}}
        )
    assert "spec is immutable" in str(refused.value.body)


def test_a_second_job_writing_the_same_output_is_refused_by_a_condition_and_an_event(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    # Pods of these jobs would find no node (no such GPU): nothing runs, the operator still decides.
    gpus = {"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"}
    create(api, namespace, batch_job("first", gpus=gpus))
    wait_until(lambda: status(api, namespace, "first").get("jobName"), what="first job's Job")
    second = batch_job("second", gpus=gpus)
    second["spec"]["output"] = batch_job("first")["spec"]["output"]
    second["spec"]["output"]["persistentVolumeClaim"]["path"] = "out/./first/"
    create(api, namespace, second)
    st = wait_until(
        lambda: (s := status(api, namespace, "second")).get("phase") == "Failed" and s,
        what="second refused",
    )
    failed = cond(st, "Failed")
    assert failed["reason"] == "OutputConflict"
    assert "is the output of LLMBatchJob first" in failed["message"]
    assert "jobName" not in st
    assert [e for e in events(api, namespace, "second") if e.reason == "OutputConflict"]
    assert status(api, namespace, "first").get("phase") != "Failed"


# Pods of these jobs would find no node (no such GPU): the operator decides all the same.
NO_GPU = {"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"}


def test_a_spare_job_runs_its_shards_at_the_charts_spare_class(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    spare_class = client.SchedulingV1Api(api).read_priority_class("llmfleet-spare")
    assert (spare_class.value, spare_class.preemption_policy) == (-100, "Never")
    body = batch_job("spare", gpus=NO_GPU, priority="Spare", shards=6, parallelism=2)
    create(api, namespace, body)
    name = wait_until(lambda: status(api, namespace, "spare").get("jobName"), what="its Job")
    job = client.BatchV1Api(api).read_namespaced_job(name, namespace)
    assert job.spec.template.spec.priority_class_name == "llmfleet-spare"
    # Six pieces of the input, at most two on GPUs at once.
    assert (job.spec.completions, job.spec.parallelism) == (6, 2)
    rules = api.sanitize_for_serialization(job)["spec"]["podFailurePolicy"]["rules"]
    ignored = [{"type": "DisruptionTarget", "status": "True"}]
    assert {"action": "Ignore", "onPodConditions": ignored} in rules


def test_more_shards_at_once_than_the_plan_gives_is_refused_by_a_condition(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    # spec.shards unset: one shard per planned replica, here one, which the API server cannot know.
    create(api, namespace, batch_job("wide", gpus=NO_GPU, parallelism=3))
    st = wait_until(
        lambda: (s := status(api, namespace, "wide")).get("phase") == "Failed" and s,
        what="the job refused",
    )
    failed = cond(st, "Failed")
    assert failed["reason"] == "ParallelismAboveShards"
    assert failed["message"].startswith(
        "spec.parallelism: 3 shards at once is more than the job's 1 shard(s)"
    )
    assert "jobName" not in st


def test_a_spare_job_waits_reported_while_the_operator_has_no_spare_class(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    with operator.configured("priorityClasses.spare.name="):
        create(api, namespace, batch_job("waits", gpus=NO_GPU, priority="Spare"))
        st = wait_until(
            lambda: (s := status(api, namespace, "waits")).get("phase") == "Pending" and s,
            what="the spare job reported waiting",
        )
        running = cond(st, "Running")
        assert (running["status"], running["reason"]) == ("False", "SparePriorityClassUnset")
        assert "spec.priority" in running["message"]
        assert "priorityClasses.spare.name" in running["message"]
        assert cond(st, "Failed")["status"] == "False"
        assert "jobName" not in st
        assert [e for e in events(api, namespace, "waits") if e.reason == "SparePriorityClassUnset"]
    # The operator runs with the chart's spare class again: the job starts, unedited.
    wait_until(lambda: status(api, namespace, "waits").get("jobName"), what="the job started")
