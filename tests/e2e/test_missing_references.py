"""Careless manifests, applied as a user would: each names an object that does not exist (a claim,
a Secret, a ConfigMap, a GPU no node has, an image no node can pull). Status and one Warning Event
name the spec field and the object within 20 s, in the words of the scheduler or the kubelet;
creating the object clears it and the resource becomes Available (kwok) or serves (the emulated
GPU), with no edit to it; an image is fixed by correcting the field, the one edit.

The kwok rows rely on the lab failing like a cluster: the kwok gate holds a pod whose Secret or
ConfigMap is missing, or whose image the nodes do not hold, as a kubelet does
(docs/cpu-adaptations.md, "What the lab's nodes refuse").
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack.load import (
    TINY_ARCHITECTURE,
    delete_llmd,
    tiny_llmd,
    wait_free_gpus,
)
from localcluster.nodes import Pool
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models import DEFAULT_ENGINE_IMAGE
from llmfleet.render.names import HTTP_PORT

from . import localnode
from .harness import (
    E2E_GPU_PRODUCT,
    TEST_NAMESPACE_LABEL,
    Operator,
    bound_claim,
    condition,
    stand_in,
    wait_until,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("kwok's GPU nodes, the kwok gate and the node runner"),
]

SAID_WITHIN = 20.0  # seconds from apply to the condition and the Event
RECOVERS_WITHIN = 90.0  # from creating the object to Available / Running on kwok
SERVES_WITHIN = 300.0  # from creating the object to an answer from the real engine
MISSING_GPU = "NVIDIA-E2E-NOT-IN-THIS-CLUSTER"
GPUS = {"count": 1, "memoryGiB": 80, "perNode": 8, "product": E2E_GPU_PRODUCT}
LATE_POOL = "e2e-late"
# After recovery, until the last stale condition is rewritten (one reconcile: a few seconds).
CAUSE_CLEARS_WITHIN = 15.0
LATE_NODE = f"kwok-{LATE_POOL}-0"
NAME = "careless"
# An image no registry of the lab has (its nodes hold only the images they were given).
UNPULLABLE = "docker.io/llmfleet/no-such-engine:1"
PLURALS = {"LLMDeployment": "llmdeployments", "LLMBatchJob": "llmbatchjobs"}


@dataclass(frozen=True)
class World:
    api: client.ApiClient
    cluster: Cluster
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


def secret(name: str, key: str) -> Callable[[World], None]:
    def create(w: World) -> None:
        w.core.create_namespaced_secret(
            w.namespace, {"metadata": {"name": name}, "stringData": {key: "s3cret"}}
        )

    return create


def configmap(name: str, key: str) -> Callable[[World], None]:
    line = {"custom_id": "1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}

    def create(w: World) -> None:
        w.core.create_namespaced_config_map(
            w.namespace, {"metadata": {"name": name}, "data": {key: json.dumps(line) + "\n"}}
        )

    return create


def claim(name: str) -> Callable[[World], None]:
    """A claim bound to a PersistentVolume of its own (kwok mounts nothing)."""

    def create(w: World) -> None:
        bound_claim(w.core, w.namespace, name, f"/nonexistent/{w.namespace}-{name}")

    return create


def gpu_node(product: str) -> Callable[[World], None]:
    def create(w: World) -> None:
        w.cluster.apply_nodes([Pool(name=LATE_POOL, count=1, gpus=8, product=product)])

    return create


def engine_image(image: str) -> Callable[[World], None]:
    """Corrects the LLMDeployment's spec.engine.image: the operator rolls a new pod template."""

    def fix(w: World) -> None:
        patch = json.dumps({"spec": {"engine": {"image": image}}})
        w.cluster.kubectl("patch", "llmd", NAME, "-n", w.namespace, "--type=merge", "-p", patch)

    return fix


def llmd(**spec: Any) -> dict[str, Any]:
    body = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": dict(GPUS)} | spec
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "spec": body}


def batch(**spec: Any) -> dict[str, Any]:
    body = {
        "model": {"name": "llmfleet-test/tiny-llama", "architecture": TINY_ARCHITECTURE},
        "gpus": dict(GPUS),
        "engine": {"maxModelLen": 512},
        "input": {"configMap": {"name": "prompts", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "results", "path": "out"}},
    } | spec
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMBatchJob", "spec": body}


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    reason: str  # of Available (LLMDeployment) or Running (LLMBatchJob), and of the Event
    field: str
    obj: str  # the missing object's name, as status quotes it
    create: Callable[[World], None]  # makes it exist
    present: tuple[Callable[[World], None], ...] = ()  # what exists from the start
    undo: Callable[[World], None] | None = None  # what `create` made outside the namespace
    edits: int = 0  # edits of the resource that `create` makes (a corrected field)


ROWS = {
    "model-cache-claim": Row(
        llmd(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"claimName": "hf"}}),
        "ModelCacheClaimNotFound",
        "spec.model.cache.claimName",
        'persistentvolumeclaim "hf" not found',
        claim("hf"),
    ),
    "model-token-secret": Row(
        llmd(
            model={
                "name": "meta-llama/Llama-3.1-8B-Instruct",
                "tokenSecretRef": {"name": "hf-token", "key": "token"},
            }
        ),
        "TokenSecretNotFound",
        "spec.model.tokenSecretRef",
        'secret "hf-token" not found',
        secret("hf-token", "token"),
    ),
    "engine-api-key-secret": Row(
        llmd(engine={"apiKeySecretRef": {"name": "api-keys", "key": "key"}}),
        "APIKeySecretNotFound",
        "spec.engine.apiKeySecretRef",
        'secret "api-keys" not found',
        secret("api-keys", "key"),
    ),
    "gpu-product-no-node-has": Row(
        llmd(gpus=GPUS | {"product": MISSING_GPU}),
        "GPUProductNotFound",
        "spec.gpus.product",
        f"no node carries nvidia.com/gpu.product={MISSING_GPU}",
        gpu_node(MISSING_GPU),
        undo=lambda w: w.core.delete_node(LATE_NODE),
    ),
    "engine-image-no-node-holds": Row(
        llmd(engine={"image": UNPULLABLE}),
        "EngineImagePullFailed",
        "spec.engine.image",
        f'cannot pull image "{UNPULLABLE}"',
        engine_image(DEFAULT_ENGINE_IMAGE),
        edits=1,
    ),
    "batch-input-configmap": Row(
        batch(),
        "InputConfigMapNotFound",
        "spec.input.configMap",
        'configmap "prompts" not found',
        configmap("prompts", "in.jsonl"),
        present=(claim("results"),),
    ),
    "batch-output-claim": Row(
        batch(),
        "OutputClaimNotFound",
        "spec.output.persistentVolumeClaim",
        'persistentvolumeclaim "results" not found',
        claim("results"),
        present=(configmap("prompts", "in.jsonl"),),
    ),
}


@pytest.fixture
def world(api: client.ApiClient, cluster: Cluster, namespace: str) -> Iterator[World]:
    yield World(api, cluster, namespace)
    core = client.CoreV1Api(api)
    for pv in core.list_persistent_volume(
        label_selector=f"{TEST_NAMESPACE_LABEL}={namespace}"
    ).items:
        core.delete_persistent_volume(pv.metadata.name)


def get(w: World, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(w.api).get_namespaced_custom_object(
        GROUP, VERSION, w.namespace, PLURALS[kind], name
    )
    return obj


def warnings(w: World, kind: str, name: str) -> list[client.CoreV1Event]:
    return [
        e
        for e in w.core.list_namespaced_event(w.namespace).items
        if e.involved_object.kind == kind and e.involved_object.name == name and e.type == "Warning"
    ]


def said(w: World, kind: str, name: str, row: Row) -> dict[str, Any] | None:
    """The condition naming the field and the object, once status and an Event both do."""
    ctype = "Available" if kind == "LLMDeployment" else "Running"
    cond = condition(get(w, kind, name), ctype)
    if cond.get("status") != "False" or cond.get("reason") != row.reason:
        return None
    events = [e for e in warnings(w, kind, name) if e.reason == row.reason]
    if not events:
        return None
    for text in (cond["message"], events[0].message):
        assert f"{row.field}: {row.obj}" in text, text
    return cond


def recovered(w: World, kind: str, name: str) -> bool:
    obj = get(w, kind, name)
    if kind == "LLMDeployment":
        return condition(obj, "Available").get("status") == "True"
    # kwok ends a Job's pod as soon as it runs: Complete, or Running on the way.
    return (obj.get("status") or {}).get("phase") in ("Running", "Complete")


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_a_missing_object_is_named_with_its_field_and_clears_once_it_exists(
    operator: Operator, world: World, row: Row
) -> None:
    kind, name = row.body["kind"], NAME
    for make in row.present:
        make(world)
    body = row.body | {"metadata": {"name": name}}
    started = time.monotonic()
    world.cluster.kubectl("apply", "-n", world.namespace, "-f", "-", input=yaml.safe_dump(body))
    cond = wait_until(
        lambda: said(world, kind, name, row), SAID_WITHIN, 0.5, f"{row.reason} in status"
    )
    print(f"after {time.monotonic() - started:.1f} s: {cond['reason']}: {cond['message']}")
    if kind == "LLMDeployment":  # what a person reads without -o yaml
        assert row.reason in world.cluster.kubectl("get", "llmd", name, "-n", world.namespace)
    try:
        row.create(world)
        wait_until(lambda: recovered(world, kind, name), RECOVERS_WITHIN, 1, f"{name} recovered")
        # The cause leaves every condition too. Available follows the Deployment's status and
        # ScalingLimited the pods' (two watches): the first status that says Available may still
        # carry the pod's last scheduling failure, until the pod's own update is reconciled.
        cause = f"{row.field}: {row.obj}"
        after = wait_until(
            lambda: (
                (o := get(world, kind, name))
                and cause not in json.dumps(o["status"]["conditions"])
                and o
            ),
            CAUSE_CLEARS_WITHIN,
            0.5,
            f"{cause} gone from status",
        )
        assert after["metadata"]["generation"] == 1 + row.edits  # no other edit to it
        assert len([e for e in warnings(world, kind, name) if e.reason == row.reason]) == 1
    finally:
        if row.undo is not None:
            row.undo(world)


# --- the emulated GPU: the node runner refuses as a kubelet does, and the engine then serves ---


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=1) as node:
        yield node


def completion(pod_ip: str) -> str:
    base = f"http://{pod_ip}:{HTTP_PORT}/v1"
    with urllib.request.urlopen(f"{base}/models", timeout=10) as r:
        model = json.load(r)["data"][0]["id"]
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 4}).encode()
    req = urllib.request.Request(
        f"{base}/completions", body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return str(json.load(r)["choices"][0]["text"])


def test_an_engine_waits_for_its_token_secret_and_serves_once_it_exists(
    operator: Operator, world: World, node_runner: str
) -> None:
    wait_free_gpus(world.core, node_runner, 1)
    # The stand-in: what is checked is the kubelet's refusal, status and the engine starting
    # once the Secret exists, none of which is vLLM's doing (test_demo.py serves on real vLLM).
    body = stand_in(tiny_llmd("careless"))
    body["spec"]["model"]["tokenSecretRef"] = {"name": "hf-token", "key": "token"}
    body["spec"]["router"] = {"enabled": False}
    world.cluster.kubectl("apply", "-n", world.namespace, "-f", "-", input=yaml.safe_dump(body))
    row = ROWS["model-token-secret"]
    try:
        wait_until(
            lambda: said(world, "LLMDeployment", "careless", row), SAID_WITHIN, 0.5, row.reason
        )
        pod = world.core.list_namespaced_pod(world.namespace).items[0]
        waiting = pod.status.container_statuses[0].state.waiting
        assert (waiting.reason, waiting.message) == (
            "CreateContainerConfigError",
            'secret "hf-token" not found',
        )
        row.create(world)
        wait_until(
            lambda: recovered(world, "LLMDeployment", "careless"), SERVES_WITHIN, 2, "serving"
        )
        pod = world.core.list_namespaced_pod(world.namespace).items[0]
        assert completion(pod.status.pod_ip)
    finally:
        delete_llmd(world.api, world.namespace, "careless")
