"""What every kind's reconcile shares (llmfleet.reconcile.base): errors counted once however the
reconcile started, an API server's refusal reported once, and no per-resource state kept for a
resource once it is gone."""

from __future__ import annotations

import json
import threading

import pytest
from fake_api import FakeApi, install
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from test_status_written import BATCH_SPEC, CHAT, CHAT_SPEC, NS, batchjob, llmdeployment

from llmfleet.reconcile.batchjob import BatchJobController
from llmfleet.reconcile.controller import Controller
from llmfleet.reconcile.resync import Resyncer

QUOTA = ApiException(status=403, reason="Forbidden")
QUOTA.body = json.dumps({"message": "exceeded quota: gpus"})


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return install(monkeypatch)


def errors() -> tuple[float, float]:
    """llmfleet_reconcile_total{result="error"}, and the errors counted for NS/chat by reason."""
    total = REGISTRY.get_sample_value("llmfleet_reconcile_total", {"result": "error"}) or 0.0
    labels = {"namespace": NS, "llmdeployment": "chat", "reason": "Forbidden"}
    by_reason = REGISTRY.get_sample_value("llmfleet_reconcile_errors_total", labels) or 0.0
    return total, by_reason


def resync_once(controller: Controller) -> None:
    """One pass of a Resyncer over NS/chat, as the operator's resync runs it."""
    passed = threading.Event()

    def reconcile(namespace: str, name: str) -> None:
        try:
            controller.reconcile_by_name(namespace, name)
        finally:
            resyncer.stop()
            passed.set()

    resyncer = Resyncer("resync", lambda: [(NS, "chat")], reconcile, 0.01)
    resyncer.start()
    assert passed.wait(10)
    resyncer._thread.join(10)


def test_a_refused_apply_is_counted_once_and_reported_once(fake: FakeApi) -> None:
    fake.refuse["Deployment"] = QUOTA
    llmdeployment(fake, CHAT_SPEC)
    controller = Controller(k8s.ApiClient())
    before = errors()
    resync_once(controller)
    resync_once(controller)
    total, by_reason = errors()
    assert (total - before[0], by_reason - before[1]) == (2, 2)  # two reconciles, two errors
    refusals = [e for e in fake.events if e[1] == "ApplyRefused"]
    assert refusals == [("Warning", "ApplyRefused", "API 403 Forbidden: exceeded quota: gpus")]


def test_nothing_is_kept_for_a_resource_once_it_is_gone(fake: FakeApi) -> None:
    fake.refuse["Deployment"] = QUOTA
    llmdeployment(fake, CHAT_SPEC)
    controller = Controller(k8s.ApiClient())
    with pytest.raises(ApiException):
        controller.reconcile_by_name(NS, "chat")
    assert set(controller._refusals) == {(NS, "chat")}
    assert controller._locks == {}  # held only while a reconcile runs or waits
    del fake.objects[CHAT]
    controller.reconcile_by_name(NS, "chat")
    assert (controller._refusals, controller._locks, controller._queued) == ({}, {}, set())
    assert errors()[1] == 0  # the resource's error series went with it


def test_a_batch_job_that_is_gone_is_no_longer_polled(fake: FakeApi) -> None:
    batchjob(fake, BATCH_SPEC)
    controller = BatchJobController(k8s.ApiClient(), scraper=lambda _ip: None)
    controller.reconcile_by_name(NS, "tiny")
    assert controller.active() == [(NS, "tiny")]
    del fake.objects[("llmfleet.dev/v1alpha1", "LLMBatchJob", NS, "tiny")]
    controller.reconcile_by_name(NS, "tiny")
    assert (controller.active(), controller._locks, controller._queued) == ([], {}, set())
