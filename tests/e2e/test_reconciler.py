"""What every kind's reconcile shares (llmfleet.reconcile.machinery.base), against the real API
server: an error is counted once however the reconcile started, and nothing is kept for a resource
once it is gone. The controllers run in this process (their bookkeeping is what is checked), beside
the session's operator, which reconciles the same objects to the same result. The errors come from a
ResourceQuota, which the controller manager's quota controller enforces (and the operator runs as
another process, so this process's metrics are the controllers' alone): not in the API tier,
which has tests/api/test_reconciler.py."""

from __future__ import annotations

import threading

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from localcluster.metricsstack.load import wait_until
from localcluster.supervisor import Cluster
from manifests import create, custom, delete
from prometheus_client import REGISTRY

from llmfleet.models.crd import custom_resource_definition
from llmfleet.models.deployment import PLURAL
from llmfleet.models.resources import LLMDEPLOYMENT
from llmfleet.reconcile.llmdeployment.controller import Controller
from llmfleet.reconcile.machinery.resync import Resyncer
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module", autouse=True)
def crd(cluster: Cluster) -> None:
    # The CRD the chart renders (the operator fixture installs it too): these tests run without.
    crd = custom_resource_definition(LLMDEPLOYMENT)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(crd))
    cluster.wait_established([crd["metadata"]["name"]])


CHAT_SPEC = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "gpus": {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"},
}


def refuse_deployments(api: client.ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    quota = {
        "metadata": {"name": "no-deployments"},
        "spec": {"hard": {"count/deployments.apps": "0"}},
    }
    core.create_namespaced_resource_quota(ns, quota)
    # The quota controller fills in status.hard before the quota is enforced.
    wait_until(
        lambda: core.read_namespaced_resource_quota("no-deployments", ns).status.hard,
        30,
        0.5,
        "the quota controller setting the quota's status",
    )


def errors(ns: str) -> tuple[float, float]:
    """llmfleet_reconcile_total{kind="LLMDeployment", result="error"}, and the errors counted
    for ns/chat by reason."""
    kind = "LLMDeployment"
    result = {"kind": kind, "result": "error"}
    total = REGISTRY.get_sample_value("llmfleet_reconcile_total", result) or 0.0
    labels = {"kind": kind, "namespace": ns, "name": "chat", "reason": "Forbidden"}
    by_reason = REGISTRY.get_sample_value("llmfleet_reconcile_errors_total", labels) or 0.0
    return total, by_reason


def resync_once(controller: Controller, ns: str) -> None:
    """One pass of a Resyncer over ns/chat, as the operator's resync runs it."""
    passed = threading.Event()

    def reconcile(namespace: str, name: str) -> None:
        try:
            controller.work(namespace, name)
        finally:
            resyncer.stop()
            passed.set()

    resyncer = Resyncer("resync", lambda: [(ns, "chat")], reconcile, 0.01)
    resyncer.start()
    assert passed.wait(30)
    resyncer._thread.join(30)


def test_a_refused_apply_is_counted_once_per_reconcile(
    api: client.ApiClient, namespace: str
) -> None:
    refuse_deployments(api, namespace)
    create(api, namespace, custom("LLMDeployment", "chat", CHAT_SPEC))
    controller = Controller(api, FLEET)
    before = errors(namespace)
    resync_once(controller, namespace)
    resync_once(controller, namespace)
    total, by_reason = errors(namespace)
    assert (total - before[0], by_reason - before[1]) == (2, 2)  # two reconciles, two errors


def test_nothing_is_kept_for_a_resource_once_it_is_gone(
    api: client.ApiClient, namespace: str
) -> None:
    refuse_deployments(api, namespace)
    create(api, namespace, custom("LLMDeployment", "chat", CHAT_SPEC))
    controller = Controller(api, FLEET)
    with pytest.raises(ApiException):
        controller.reconcile(namespace, "chat")
    assert set(controller._refusals) == {(namespace, "chat")}
    assert len(controller.backoff) == 1
    delete(api, namespace, PLURAL, "chat")
    assert controller.work(namespace, "chat") is None  # gone: no retry
    assert (controller._refusals, len(controller.backoff)) == ({}, 0)
    assert errors(namespace)[1] == 0  # the resource's error series went with it
