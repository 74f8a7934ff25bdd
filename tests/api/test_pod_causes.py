"""Why a pod cannot run reaches both kinds' conditions, and leaves them once the pod runs: pods
created here as the operator's children, their status written through the API as a kubelet
would (this tier has no kubelet), and the operator of this process reading them."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.operator_process import Operator
from localcluster.waiting import wait_until
from manifests import H100, batch_job, cond, create, llmd, status

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.deployment import PLURAL
from llmfleet.reconcile.llmbatchjob.batchpods import INDEX_ANNOTATION
from llmfleet.render.batchjob import BATCHJOB_LABEL
from llmfleet.render.batchjob import CONTAINER as BATCH_CONTAINER
from llmfleet.render.names import DEPLOYMENT_LABEL, ENGINE_CONTAINER, MANAGED_BY

pytestmark = pytest.mark.cluster

IMAGE = "registry.invalid/vllm:nope"
NO_GPU = {"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"}


def child_pod(
    core: client.CoreV1Api, ns: str, owner: tuple[str, str], container: str, **spec: Any
) -> dict[str, Any]:
    # Without a controller manager no one makes the namespace's default ServiceAccount.
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    body = {
        "metadata": {
            "name": f"{owner[1]}-pod",
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, owner[0]: owner[1]},
            "annotations": {INDEX_ANNOTATION: "0"},
        },
        "spec": {
            "containers": [{"name": container, "image": IMAGE}],
            "automountServiceAccountToken": False,
            **spec,
        },
    }
    made = core.create_namespaced_pod(ns, body)
    return dict(core.api_client.sanitize_for_serialization(made))


def write_status(
    core: client.CoreV1Api, ns: str, pod: dict[str, Any], container: str, state: dict[str, Any]
) -> None:
    """The pod's status as a kubelet writes it; `state` replaces the container's state."""
    running = "running" in state
    said = {
        "name": container,
        "image": IMAGE,
        "imageID": "",
        "ready": running,
        "restartCount": 3 if "lastState" in state else 0,
        "state": {k: state.get(k) for k in ("waiting", "running")},
        "lastState": state.get("lastState") or {},
    }
    core.patch_namespaced_pod_status(
        pod["metadata"]["name"],
        ns,
        {"status": {"phase": "Running" if running else "Pending", "containerStatuses": [said]}},
    )


NOW = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
RUNNING = {"running": {"startedAt": NOW}}


def deployment_conditions(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, PLURAL, name
    )
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def test_a_deployment_names_the_image_it_cannot_pull_and_recovers_when_the_pod_runs(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    create(api, namespace, llmd("pull", gpus=dict(H100)))
    wait_until(lambda: deployment_conditions(api, namespace, "pull").get("Available"))
    pod = child_pod(core, namespace, (DEPLOYMENT_LABEL, "pull"), ENGINE_CONTAINER)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}}
    write_status(core, namespace, pod, ENGINE_CONTAINER, waiting)

    def named() -> dict[str, Any] | None:
        c = deployment_conditions(api, namespace, "pull")
        return c if c["Available"]["reason"] == "EngineImagePullFailed" else None

    conds = wait_until(named, timeout=20, what="Available naming the image")
    for ctype in ("Available", "Degraded"):
        assert f'spec.engine.image: cannot pull image "{IMAGE}"' in conds[ctype]["message"]
    assert conds["Degraded"]["reason"] == "EngineImagePullFailed"

    write_status(core, namespace, pod, ENGINE_CONTAINER, RUNNING)
    conds = wait_until(
        lambda: (
            (c := deployment_conditions(api, namespace, "pull"))["Available"]["reason"]
            != "EngineImagePullFailed"
            and c
        ),
        timeout=20,
        what="the cause gone from status",
    )
    assert all("spec.engine.image" not in c["message"] for c in conds.values())


def test_a_batch_job_names_its_shards_oom_kill_and_recovers_when_the_shard_runs(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    create(api, namespace, batch_job("oom", gpus=NO_GPU))
    wait_until(lambda: status(api, namespace, "oom").get("jobName"), what="its Job")
    pod = child_pod(core, namespace, (BATCHJOB_LABEL, "oom"), BATCH_CONTAINER)
    crash = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    }
    write_status(core, namespace, pod, BATCH_CONTAINER, crash)
    running = wait_until(
        lambda: (
            (c := cond(status(api, namespace, "oom"), "Running"))["reason"] == "EngineOOMKilled"
            and c
        ),
        timeout=20,
        what="Running naming the OOM kill",
    )
    assert running["status"] == "False"
    assert (
        "spec.engine.resources: container runner keeps exiting (last: OOMKilled, exit code 137)"
        in (running["message"])
    )

    write_status(core, namespace, pod, BATCH_CONTAINER, RUNNING)
    running = wait_until(
        lambda: (
            (c := cond(status(api, namespace, "oom"), "Running"))["reason"] != "EngineOOMKilled"
            and c
        ),
        timeout=20,
        what="the cause gone from status",
    )
    assert "OOMKilled" not in running["message"]
