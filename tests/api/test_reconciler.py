"""What every kind's reconcile shares (llmfleet.reconcile.machinery.base), against the API server:
nothing is kept for a resource once it is gone, and it is not retried. The controller runs in this
test (its bookkeeping is what is checked), beside the tier's operator, which reconciles the same
objects to the same result.
(The errors a ResourceQuota causes need the controller manager: tests/e2e/test_reconciler.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from localcluster.waiting import wait_until
from manifests import create, custom, delete
from prometheus_client import REGISTRY

from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.reconcile.llmbatchjob.batchjob import BatchJobController
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

pytestmark = pytest.mark.cluster

BATCH_SPEC = {
    "model": {"name": "/models/tiny-llama", "architecture": TINY_ARCHITECTURE},
    "engine": {"maxModelLen": 512},
    "shards": 2,
    "input": {"configMap": {"name": "prompts", "key": "prompts.jsonl"}},
    "output": {"persistentVolumeClaim": {"claimName": "results", "path": "run-1"}},
}


def test_a_batch_job_that_is_gone_is_no_longer_polled(
    api: client.ApiClient, namespace: str
) -> None:
    create(api, namespace, custom("LLMBatchJob", "tiny", BATCH_SPEC))
    controller = BatchJobController(api, FLEET, scraper=lambda _ip: None)
    try:
        # The tier's own operator reconciles the same job: where its status write lands between
        # this reconcile's read and write, this one gets a 409 and is retried from a fresh read,
        # as its queue would.
        wait_until(
            lambda: controller.work(namespace, "tiny") is None, what="a reconcile without a retry"
        )
        assert controller.active() == [(namespace, "tiny")]
        delete(api, namespace, BATCH_PLURAL, "tiny")
        assert controller.work(namespace, "tiny") is None  # gone: no retry
        assert (controller.active(), len(controller.backoff)) == ([], 0)
    finally:
        controller.view.stop()  # its own watches: they would outlive the tier's API server


def counted(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def errors_in(namespace: str) -> dict[str, float]:
    """Reconcile errors counted for any resource of `namespace`, by reason."""
    found: dict[str, float] = {}
    for family in REGISTRY.collect():
        if family.name != "llmfleet_reconcile_errors":
            continue
        for s in family.samples:
            if s.name.endswith("_total") and s.labels["namespace"] == namespace:
                found[s.labels["reason"]] = found.get(s.labels["reason"], 0.0) + s.value
    return found


def reconciled(controller: BatchJobController, namespace: str, name: str) -> Any:
    """The reconcile's result, or None where a concurrent status write made it a 409."""
    try:
        return controller.reconcile(namespace, name)
    except ApiException as e:
        if e.status != 409:
            raise
        return None


def test_a_batch_job_reconcile_counts_under_its_kind_and_its_writes_once(
    api: client.ApiClient, namespace: str
) -> None:
    # The tier's own operator runs in this process and reconciles the same job at any moment, into
    # the same registry: the counts are read as what both did, never as this call's alone.
    kind = "LLMBatchJob"
    results = ("changed", "unchanged", "invalid", "error")
    jobs = counted("llmfleet_api_writes_total", verb="create", kind="Job")
    before = {r: counted("llmfleet_reconcile_total", kind=kind, result=r) for r in results}
    create(api, namespace, custom("LLMBatchJob", "counted", BATCH_SPEC))
    controller = BatchJobController(api, FLEET, scraper=lambda _ip: None)
    try:
        # Where the tier's operator writes the job's status between this reconcile's read and
        # write, this one gets a 409 (counted as a Conflict error) and runs again from a fresh
        # read, as its queue would.
        applied = wait_until(lambda: reconciled(controller, namespace, "counted"), timeout=30)
        after = {r: counted("llmfleet_reconcile_total", kind=kind, result=r) for r in results}
        outcome = "changed" if applied.writes else "unchanged"
        assert after[outcome] - before[outcome] >= 1
        assert after["invalid"] == before["invalid"]
        # Each Job the namespace holds was counted once, whichever reconcile created it.
        made = client.BatchV1Api(api).list_namespaced_job(namespace).items
        assert made
        assert counted("llmfleet_api_writes_total", verb="create", kind="Job") - jobs == len(made)
        assert set(errors_in(namespace)) <= {"Conflict"}
    finally:
        controller.view.stop()
