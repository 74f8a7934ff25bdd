"""Careless manifests, applied as a user would, one row per reason the scheduler or the kubelet
keeps a pod from running, for both kinds: an object that does not exist (a claim, a Secret, a
ConfigMap, a GPU no node has), a claim no volume binds, more cpu than a node has, an image no node
can pull, and an image that cannot run the operator's command. Status and one Warning Event name
the spec field and quote Kubernetes within 20 s; fixing the cause (creating the object, binding
the claim) clears it and the resource becomes Available (kwok) or runs, with no edit to it; an
image or a resource request is fixed by correcting the field, the one edit. An LLMBatchJob's spec
is immutable, so its image rows check the naming only (the fix is a new job).

All rows run at once in one namespace, on kwok's nodes (nothing real starts): the module waits
for all of them together, so it takes about as long as its slowest row. The kwok rows rely on the
lab refusing as a kubelet does: the kwok gate holds a pod whose Secret or ConfigMap is missing,
whose image the nodes do not hold, or whose command its image lacks (docs/cpu-adaptations.md,
"What the lab's nodes refuse"). The last rows run the engine stand-in on the node runner, both
at once, each until it serves: a missing Secret, and a memory limit the engine exceeds (the node
runner kills it as a node's cgroup does: OOMKilled).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusters import fresh_namespace
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
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE
from llmfleet.render.names import HTTP_PORT

from . import localnode
from .harness import (
    E2E_GPU_PRODUCT,
    TEST_NAMESPACE_LABEL,
    Operator,
    bound_claim,
    condition,
    stand_in,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("kwok's GPU nodes, the kwok gate and the node runner"),
]

SAID_WITHIN = 20.0  # seconds from apply to the condition and the Event
# From the fix to Available / Running on kwok: about 20 s for every row in the runs so far. The
# bound is kube-scheduler's, not ours: a claim row relies on it retrying the pod once its claim
# is Bound, and once in 5 runs here (2026-11-28) it made no attempt after the claim's Bound
# update (as in kubernetes/kubernetes#87145) until its flush of pods unschedulable for 5 minutes
# (--pod-max-in-unschedulable-pods-duration), as it would on any cluster. So 5 minutes and a
# margin: a row that has not recovered by then never will without an edit.
RECOVERS_WITHIN = 330.0
SERVES_WITHIN = 300.0  # from creating the object to an answer from the engine stand-in
# After recovery, until the last stale condition is rewritten (one reconcile: a few seconds).
CAUSE_CLEARS_WITHIN = 15.0
MISSING_GPU = "NVIDIA-E2E-NOT-IN-THIS-CLUSTER"
GPUS = {"count": 1, "memoryGiB": 80, "perNode": 8, "product": E2E_GPU_PRODUCT}
LATE_POOLS = {"deployment": "e2e-late", "batch": "e2e-late-batch"}
# An image no registry of the lab has (its nodes hold only the images they were given).
UNPULLABLE = "docker.io/llmfleet/no-such-engine:1"
# Images the nodes hold that lack the command the operator renders: the operator's own image
# (the adapter fetcher's) has no `vllm`, busybox no `python3` for the batch runner.
NO_VLLM, NO_PYTHON = DEFAULT_FETCHER_IMAGE, "busybox"
CPU_NO_NODE_HAS = "500"  # the e2e nodes have 96
PLURALS = {"LLMDeployment": "llmdeployments", "LLMBatchJob": "llmbatchjobs"}


@dataclass(frozen=True)
class World:
    api: client.ApiClient
    cluster: Cluster
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


Step = Callable[[World, str], None]  # given the world and the row's resource name


def secret(name: str, key: str) -> Step:
    def create(w: World, _: str) -> None:
        w.core.create_namespaced_secret(
            w.namespace, {"metadata": {"name": name}, "stringData": {key: "s3cret"}}
        )

    return create


def configmap(name: str, key: str) -> Step:
    line = {"custom_id": "1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}

    def create(w: World, _: str) -> None:
        w.core.create_namespaced_config_map(
            w.namespace, {"metadata": {"name": name}, "data": {key: json.dumps(line) + "\n"}}
        )

    return create


def claim(name: str) -> Step:
    """A claim bound to a PersistentVolume of its own (kwok mounts nothing)."""

    def create(w: World, _: str) -> None:
        bound_claim(w.core, w.namespace, name, f"/nonexistent/{w.namespace}-{name}")

    return create


def unbound_claim(name: str) -> Step:
    """A claim that nothing binds: no volume names it and no provisioner runs here."""

    def create(w: World, _: str) -> None:
        spec = {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        }
        w.core.create_namespaced_persistent_volume_claim(
            w.namespace, {"metadata": {"name": name}, "spec": spec}
        )

    return create


def volume_for(name: str) -> Step:
    """A PersistentVolume for the unbound claim `name`: the volume controller binds them."""

    def create(w: World, _: str) -> None:
        spec = {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": f"/nonexistent/{w.namespace}-{name}"},
            "claimRef": {"namespace": w.namespace, "name": name},
        }
        labels = {TEST_NAMESPACE_LABEL: w.namespace}
        w.core.create_persistent_volume(
            {"metadata": {"name": f"{w.namespace}-{name}", "labels": labels}, "spec": spec}
        )

    return create


def gpu_node(pool: str, product: str) -> Step:
    def create(w: World, _: str) -> None:
        w.cluster.apply_nodes([Pool(name=pool, count=1, gpus=8, product=product)])

    return create


def delete_node(pool: str) -> Step:
    return lambda w, _: w.core.delete_node(f"kwok-{pool}-0")


def engine(**fields: Any) -> Step:
    """Corrects the LLMDeployment's spec.engine: the operator rolls a new pod template."""

    def fix(w: World, name: str) -> None:
        patch = json.dumps({"spec": {"engine": fields}})
        w.cluster.kubectl("patch", "llmd", name, "-n", w.namespace, "--type=merge", "-p", patch)

    return fix


def llmd(**spec: Any) -> dict[str, Any]:
    body = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": dict(GPUS)} | spec
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMDeployment", "spec": body}


def batch(prompts: str, results: str, **spec: Any) -> dict[str, Any]:
    body = {
        "model": {"name": "llmfleet-test/tiny-llama", "architecture": TINY_ARCHITECTURE},
        "gpus": dict(GPUS),
        "engine": {"maxModelLen": 512},
        "input": {"configMap": {"name": prompts, "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": results, "path": "out"}},
    } | spec
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LLMBatchJob", "spec": body}


def batch_with_inputs(name: str, **spec: Any) -> tuple[dict[str, Any], tuple[Step, ...]]:
    """A batch job whose input and output exist: the job and what to create before it."""
    prompts, results = f"{name}-prompts", f"{name}-results"
    return batch(prompts, results, **spec), (configmap(prompts, "in.jsonl"), claim(results))


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    reason: str  # of Available (LLMDeployment) or Running (LLMBatchJob), and of the Event
    field: str
    said: str  # what status quotes after the field, as Kubernetes said it
    fix: Step | None  # removes the cause; None: only a new resource would (an immutable spec)
    present: tuple[Step, ...] = ()  # what exists from the start
    undo: Step | None = None  # what `fix` made outside the namespace
    edits: int = 0  # edits of the resource that `fix` makes (a corrected field)

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def cause(self) -> str:
        return f"{self.field}: {self.said}"


def _rows() -> dict[str, Row]:
    token = {
        "name": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenSecretRef": {"name": "hf-token", "key": "token"},
    }
    tiny_token = {
        "name": "llmfleet-test/tiny-llama",
        "architecture": TINY_ARCHITECTURE,
        "tokenSecretRef": {"name": "batch-token", "key": "token"},
    }
    batch_token, batch_token_inputs = batch_with_inputs("batch-token", model=tiny_token)
    batch_gpu, batch_gpu_inputs = batch_with_inputs(
        "batch-gpu", gpus=GPUS | {"product": f"{MISSING_GPU}-B"}
    )
    batch_pull, batch_pull_inputs = batch_with_inputs(
        "batch-pull", engine={"maxModelLen": 512, "image": UNPULLABLE}
    )
    batch_start, batch_start_inputs = batch_with_inputs(
        "batch-start", engine={"maxModelLen": 512, "image": NO_PYTHON}
    )
    return {
        "model-cache-claim": Row(
            llmd(model={"name": "meta-llama/Llama-3.1-8B-Instruct", "cache": {"claimName": "hf"}}),
            "ModelCacheClaimNotFound",
            "spec.model.cache.claimName",
            'persistentvolumeclaim "hf" not found',
            claim("hf"),
        ),
        "model-cache-claim-unbound": Row(
            llmd(
                model={
                    "name": "meta-llama/Llama-3.1-8B-Instruct",
                    "cache": {"claimName": "hf-unbound"},
                }
            ),
            "ModelCacheClaimUnbound",
            "spec.model.cache.claimName",
            "pod has unbound immediate PersistentVolumeClaims (scheduler",
            volume_for("hf-unbound"),
            present=(unbound_claim("hf-unbound"),),
        ),
        "model-token-secret": Row(
            llmd(model=token),
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
            gpu_node(LATE_POOLS["deployment"], MISSING_GPU),
            undo=delete_node(LATE_POOLS["deployment"]),
        ),
        "engine-cpu-no-node-has": Row(
            llmd(engine={"resources": {"requests": {"cpu": CPU_NO_NODE_HAS}}}),
            "InsufficientResources",
            "spec.engine.resources",
            "Insufficient cpu",
            engine(resources={"requests": {"cpu": "1"}}),
            edits=1,
        ),
        "engine-image-no-node-holds": Row(
            llmd(engine={"image": UNPULLABLE}),
            "EngineImagePullFailed",
            "spec.engine.image",
            f'cannot pull image "{UNPULLABLE}"',
            engine(image=DEFAULT_ENGINE_IMAGE),
            edits=1,
        ),
        "engine-image-without-vllm": Row(
            llmd(engine={"image": NO_VLLM}),
            "EngineImageStartFailed",
            "spec.engine.image",
            f'container vllm cannot start in image "{NO_VLLM}": exec: "vllm": executable file '
            "not found in $PATH",
            engine(image=DEFAULT_ENGINE_IMAGE),
            edits=1,
        ),
        "batch-input-configmap": Row(
            batch("prompts", "results"),
            "InputConfigMapNotFound",
            "spec.input.configMap",
            'configmap "prompts" not found',
            configmap("prompts", "in.jsonl"),
            present=(claim("results"),),
        ),
        "batch-output-claim": Row(
            batch("out-prompts", "out-results"),
            "OutputClaimNotFound",
            "spec.output.persistentVolumeClaim",
            'persistentvolumeclaim "out-results" not found',
            claim("out-results"),
            present=(configmap("out-prompts", "in.jsonl"),),
        ),
        "batch-model-token-secret": Row(
            batch_token,
            "TokenSecretNotFound",
            "spec.model.tokenSecretRef",
            'secret "batch-token" not found',
            secret("batch-token", "token"),
            present=batch_token_inputs,
        ),
        "batch-gpu-product-no-node-has": Row(
            batch_gpu,
            "GPUProductNotFound",
            "spec.gpus.product",
            f"no node carries nvidia.com/gpu.product={MISSING_GPU}-B",
            gpu_node(LATE_POOLS["batch"], f"{MISSING_GPU}-B"),
            present=batch_gpu_inputs,
            undo=delete_node(LATE_POOLS["batch"]),
        ),
        "batch-engine-image-no-node-holds": Row(
            batch_pull,
            "EngineImagePullFailed",
            "spec.engine.image",
            f'cannot pull image "{UNPULLABLE}"',
            None,
            present=batch_pull_inputs,
        ),
        "batch-engine-image-without-python": Row(
            batch_start,
            "EngineImageStartFailed",
            "spec.engine.image",
            f'container runner cannot start in image "{NO_PYTHON}": exec: "python3": '
            "executable file not found in $PATH",
            None,
            present=batch_start_inputs,
        ),
    }


ROWS = _rows()


@dataclass
class Outcome:
    """What one row's resource did: when status named the cause, and when it recovered."""

    said_after: float | None = None
    said: dict[str, Any] = field(default_factory=dict)  # the condition then
    event: str = ""  # the Warning Event's message then
    shown: str = ""  # `kubectl get` then
    recovered_after: float | None = None
    after: dict[str, Any] = field(default_factory=dict)  # the resource once the cause left
    warnings: int = 0  # Warning Events of the row's reason at the end
    last_seen: dict[str, Any] = field(default_factory=dict)  # the condition when last asked


def get(w: World, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(w.api).get_namespaced_custom_object(
        GROUP, VERSION, w.namespace, PLURALS[kind], name
    )
    return obj


def warnings(w: World) -> dict[tuple[str, str, str], list[str]]:
    """The namespace's Warning Events: (kind, name, reason) -> messages."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for e in w.core.list_namespaced_event(w.namespace).items:
        if e.type == "Warning":
            key = (e.involved_object.kind, e.involved_object.name, e.reason)
            out.setdefault(key, []).append(e.message)
    return out


def said_now(
    w: World,
    name: str,
    row: Row,
    events: dict[tuple[str, str, str], list[str]],
    seen: Outcome | None = None,
) -> tuple[dict[str, Any], str] | None:
    """The condition and the Event naming the row's cause, once status and an Event both do;
    `seen` keeps the condition as it was, for a row that never gets there."""
    ctype = "Available" if row.kind == "LLMDeployment" else "Running"
    cond = condition(get(w, row.kind, name), ctype)
    if seen is not None:
        seen.last_seen = cond
    if cond.get("status") != "False" or cond.get("reason") != row.reason:
        return None
    messages = events.get((row.kind, name, row.reason), [])
    return (cond, messages[0]) if messages else None


def recovered(obj: dict[str, Any], row: Row) -> bool:
    if row.kind == "LLMDeployment":
        return condition(obj, "Available").get("status") == "True"
    # kwok ends a Job's pod as soon as it runs: Complete, or Running on the way.
    return (obj.get("status") or {}).get("phase") in ("Running", "Complete")


def cause_gone(obj: dict[str, Any], row: Row) -> bool:
    return row.cause not in json.dumps((obj.get("status") or {}).get("conditions") or [])


def wait_all(
    what: str,
    timeout: float,
    names: Iterable[str],
    step: Callable[[str], bool],
    each_round: Callable[[], None] = lambda: None,
) -> None:
    """Asks `step(name)` of every row not done yet, every half second (after `each_round()`),
    until each said yes or `timeout` passed; the rows left never did (their tests fail)."""
    deadline = time.monotonic() + timeout
    left = list(names)
    while left and time.monotonic() < deadline:
        each_round()
        for name in list(left):
            if step(name):
                left.remove(name)
        time.sleep(0.5)
    if left:
        print(f"{what}: not within {timeout:.0f} s: {sorted(left)}")


@pytest.fixture(scope="module")
def outcomes(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
) -> Iterator[dict[str, Outcome]]:
    """Every row's resource applied at once, named, fixed at once and recovered: each row's
    outcome, for the tests below to judge."""
    with fresh_namespace(api, "why-pods-cannot-run", test_namespaces, finish_namespace) as ns:
        w = World(api, cluster, ns)
        found = {name: Outcome() for name in ROWS}
        try:
            for name, row in ROWS.items():
                if row.undo is not None:  # what a run stopped half-way left (a GPU node)
                    with contextlib.suppress(client.ApiException):
                        row.undo(w, name)
                for make in row.present:
                    make(w, name)
            docs = [row.body | {"metadata": {"name": name}} for name, row in ROWS.items()]
            started = time.monotonic()
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
            events: dict[tuple[str, str, str], list[str]] = {}

            def read_events() -> None:
                events.clear()
                events.update(warnings(w))

            def named(name: str) -> bool:
                said = said_now(w, name, ROWS[name], events, found[name])
                if said is None:
                    return False
                found[name].said_after = time.monotonic() - started
                found[name].said, found[name].event = said
                if ROWS[name].kind == "LLMDeployment":  # what a person reads without -o yaml
                    found[name].shown = cluster.kubectl("get", "llmd", name, "-n", ns)
                return True

            wait_all("named", SAID_WITHIN, ROWS, named, read_events)
            fixable = {n: r for n, r in ROWS.items() if r.fix is not None}
            fixed = time.monotonic()
            for name, row in fixable.items():
                assert row.fix is not None
                row.fix(w, name)

            def cleared(name: str) -> bool:
                obj = get(w, ROWS[name].kind, name)
                if not (recovered(obj, ROWS[name]) and cause_gone(obj, ROWS[name])):
                    return False
                found[name].recovered_after = time.monotonic() - fixed
                found[name].after = obj
                return True

            # Recovery and the stale conditions' rewrite share the wait: the first status
            # that says Available may still carry the pod's last scheduling failure, until the
            # pod's own update is reconciled.
            wait_all("recovered", RECOVERS_WITHIN + CAUSE_CLEARS_WITHIN, fixable, cleared)
            took = time.monotonic() - started
            print(f"{len(ROWS)} rows: applied, named, fixed and recovered in {took:.1f} s")
            read_events()
            for name, row in ROWS.items():
                found[name].warnings = len(events.get((row.kind, name, row.reason), []))
            yield found
        finally:
            for name, row in ROWS.items():
                if row.undo is not None:
                    row.undo(w, name)
            for pv in w.core.list_persistent_volume(
                label_selector=f"{TEST_NAMESPACE_LABEL}={ns}"
            ).items:
                w.core.delete_persistent_volume(pv.metadata.name)


@pytest.mark.parametrize("name", ROWS, ids=ROWS)
def test_status_and_an_event_name_the_field_and_quote_kubernetes_within_20s(
    outcomes: dict[str, Outcome], name: str
) -> None:
    row, got = ROWS[name], outcomes[name]
    assert got.said_after is not None, (
        f"no {row.reason} in status within {SAID_WITHIN:.0f} s: {got.last_seen}"
    )
    print(f"after {got.said_after:.1f} s: {got.said['reason']}: {got.said['message']}")
    assert row.cause in got.said["message"]
    assert row.cause in got.event
    if row.kind == "LLMDeployment":
        assert row.reason in got.shown


FIXABLE = [n for n, r in ROWS.items() if r.fix is not None]


@pytest.mark.parametrize("name", FIXABLE, ids=FIXABLE)
def test_fixing_the_cause_clears_it_with_no_other_edit(
    outcomes: dict[str, Outcome], name: str
) -> None:
    row, got = ROWS[name], outcomes[name]
    assert got.said_after is not None, "never named, so never fixed as a user would"
    assert got.recovered_after is not None, f"still {row.reason} after the fix"
    print(f"recovered {got.recovered_after:.1f} s after the fix")
    assert got.after["metadata"]["generation"] == 1 + row.edits  # no other edit to it
    assert got.warnings == 1  # one Warning Event per cause, not one per reconcile


# --- the emulated GPU: the node runner refuses as a kubelet does, and the engine then serves ---


def on_the_node_runner(
    name: str, model: dict[str, Any] | None = None, **engine_fields: Any
) -> dict[str, Any]:
    """A tiny LLMDeployment on the node runner's emulated GPU, served by the engine stand-in:
    what is checked is the kubelet's refusal, status and the engine starting once fixed, none of
    which is vLLM's doing (test_demo.py serves on real vLLM)."""
    body = stand_in(tiny_llmd(name))
    body["spec"]["engine"] |= engine_fields
    body["spec"]["model"] |= model or {}
    body["spec"]["router"] = {"enabled": False}
    return body


ENGINE_ROWS = {
    "token-secret": Row(
        on_the_node_runner("token", {"tokenSecretRef": {"name": "hf-token", "key": "token"}}),
        "TokenSecretNotFound",
        "spec.model.tokenSecretRef",
        'secret "hf-token" not found',
        secret("hf-token", "token"),
    ),
    "memory-limit": Row(
        on_the_node_runner("memory", resources={"limits": {"memory": "10Mi"}}),
        "EngineOOMKilled",
        "spec.engine.resources",
        "container vllm keeps exiting (last: OOMKilled, exit code 137)",
        engine(resources={"limits": {"memory": "2Gi"}}),
        edits=1,
    ),
}
# The kubelet's own words for each row, in the engine pod's container status while it waits.
KUBELET_SAID = {
    "token-secret": ("CreateContainerConfigError", 'secret "hf-token" not found'),
    "memory-limit": ("CrashLoopBackOff", "back-off 10s restarting failed container=vllm"),
}


# One GPU per row, and one for the surge pod of the row whose fix rolls its engine: the engine
# Deployment (maxSurge 1, maxUnavailable 0) starts the new pod before it removes the old one. On
# a full node the operator would have the crash-looping pod replaced first (docs/operator.md,
# "Rollouts on a full GPU pool"; tests/e2e/test_llmdeployment.py checks that on kwok); the spare
# GPU keeps this module on the usual path.
NODE_GPUS = len(ENGINE_ROWS) + 1


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=NODE_GPUS, exactly=True) as node:
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


def engine_pod(w: World, name: str) -> client.V1Pod | None:
    pods = w.core.list_namespaced_pod(w.namespace, label_selector=f"llmfleet.dev/deployment={name}")
    live = [p for p in pods.items if not p.metadata.deletion_timestamp]
    return live[-1] if live else None


@dataclass
class Served:
    """What one engine row did: named (and what the kubelet said), then served once fixed."""

    outcome: Outcome = field(default_factory=Outcome)
    waiting: tuple[str, str] = ("", "")  # the engine container's waiting reason and message
    answer: str = ""


@pytest.fixture(scope="module")
def served(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    node_runner: str,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
) -> Iterator[dict[str, Served]]:
    """Both engine rows applied at once on the node runner, named, fixed and serving."""
    wait_free_gpus(client.CoreV1Api(api), node_runner, NODE_GPUS)
    with fresh_namespace(api, "engines-cannot-run", test_namespaces, finish_namespace) as ns:
        w = World(api, cluster, ns)
        found = {name: Served() for name in ENGINE_ROWS}
        names = {row: str(r.body["metadata"]["name"]) for row, r in ENGINE_ROWS.items()}
        try:
            docs = [r.body for r in ENGINE_ROWS.values()]
            started = time.monotonic()
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
            events: dict[tuple[str, str, str], list[str]] = {}

            def read_events() -> None:
                events.clear()
                events.update(warnings(w))

            def named(row: str) -> bool:
                said = said_now(w, names[row], ENGINE_ROWS[row], events)
                pod = engine_pod(w, names[row])
                if said is None or pod is None:
                    return False
                waiting = pod.status.container_statuses[0].state.waiting
                if waiting is None:
                    return False
                found[row].outcome.said_after = time.monotonic() - started
                found[row].outcome.said, found[row].outcome.event = said
                found[row].waiting = (waiting.reason, waiting.message or "")
                return True

            wait_all("named", SAID_WITHIN, ENGINE_ROWS, named, read_events)
            fixed = time.monotonic()
            for row, r in ENGINE_ROWS.items():
                assert r.fix is not None
                r.fix(w, names[row])

            def serving(row: str) -> bool:
                obj = get(w, "LLMDeployment", names[row])
                pod = engine_pod(w, names[row])
                if not recovered(obj, ENGINE_ROWS[row]) or pod is None:
                    return False
                found[row].answer = completion(pod.status.pod_ip)
                found[row].outcome.recovered_after = time.monotonic() - fixed
                found[row].outcome.after = obj
                return True

            wait_all("serving", SERVES_WITHIN, ENGINE_ROWS, serving)
            took = time.monotonic() - started
            print(f"{len(ENGINE_ROWS)} engine rows: named, fixed and serving in {took:.1f} s")
            yield found
        finally:
            for name in names.values():
                with contextlib.suppress(client.ApiException):
                    delete_llmd(api, ns, name)


@pytest.mark.parametrize("row", ENGINE_ROWS, ids=ENGINE_ROWS)
def test_an_engine_the_kubelet_refuses_is_named_and_serves_once_fixed(
    served: dict[str, Served], row: str
) -> None:
    r, got = ENGINE_ROWS[row], served[row]
    said = got.outcome.said
    assert got.outcome.said_after is not None, f"no {r.reason} within {SAID_WITHIN:.0f} s"
    print(f"after {got.outcome.said_after:.1f} s: {said['reason']}: {said['message']}")
    assert r.cause in said["message"]
    assert r.cause in got.outcome.event
    reason, message = KUBELET_SAID[row]
    assert got.waiting[0] == reason
    assert message in got.waiting[1]
    assert got.outcome.recovered_after is not None, (
        f"not serving {SERVES_WITHIN:.0f} s after the fix"
    )
    print(f"serving {got.outcome.recovered_after:.1f} s after the fix")
    assert got.answer
    assert got.outcome.after["metadata"]["generation"] == 1 + r.edits
