"""LLMDeployment and LLMBatchJob manifests and how the tests apply and read them: shared by the
API tier (tests/api) and the e2e tier (tests/e2e), which test the same kinds."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client
from localcluster.metricsstack.load import PRODUCT
from localcluster.metricsstack.load import TINY_MODEL as TINY_LLMD_MODEL
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL

# The GPU product of the e2e tier's kwok nodes (tests/e2e/conftest.py). The API tier has no
# nodes: there the product is only data.
E2E_GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3-E2E"
H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": E2E_GPU_PRODUCT}
PLURALS = {"LLMDeployment": PLURAL, "LLMBatchJob": BATCH_PLURAL}


def llmd(name: str, **spec: Any) -> dict[str, Any]:
    body = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": dict(H100)}
    body.update(spec)
    return custom("LLMDeployment", name, body)


def apply(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))


def deployments(api: client.ApiClient, namespace: str) -> list[client.V1Deployment]:
    """The engine Deployments (not the vLLM Router's, which multi-pod fleets also get)."""
    items: list[client.V1Deployment] = (
        client.AppsV1Api(api)
        .list_namespaced_deployment(namespace, label_selector="app.kubernetes.io/component=engine")
        .items
    )
    return items


# The tiny model the tests make (dev/dataplane), as spec.model of either kind, served as `tiny`
# (tiny_spec builds the tiny LLMDeployment's).
TINY_MODEL = {**TINY_LLMD_MODEL, "servedModelName": "tiny"}


def batch_job(name: str, **spec: Any) -> dict[str, Any]:
    """An LLMBatchJob of the tiny model on the node runner's emulated GPU, reading and writing
    the claim `data`."""
    body: dict[str, Any] = {
        "model": dict(TINY_MODEL),
        "gpus": {"count": 2, "memoryGiB": 16, "perNode": 4, "product": PRODUCT},
        "engine": {"maxModelLen": 512},
        "input": {"persistentVolumeClaim": {"claimName": "data", "path": "in/prompts.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "data", "path": f"out/{name}"}},
    }
    body.update(spec)
    return custom("LLMBatchJob", name, body)


def custom(kind: str, name: str, spec: Any) -> dict[str, Any]:
    """A manifest of one of the operator's kinds."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def create(api: client.ApiClient, ns: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, PLURALS[body["kind"]], body
    )


def delete(api: client.ApiClient, ns: str, plural: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, plural, name)


def status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """An LLMBatchJob's status."""
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, BATCH_PLURAL, name
    )
    return dict(obj.get("status") or {})


def cond(st: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == ctype), {})


def events(api: client.ApiClient, ns: str, name: str) -> list[client.CoreV1Event]:
    """The Events of the LLMBatchJob `name`."""
    items = client.CoreV1Api(api).list_namespaced_event(ns).items
    return [
        e
        for e in items
        if e.involved_object.name == name and e.involved_object.kind == "LLMBatchJob"
    ]
