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
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clusters import fresh_namespace
from kubernetes import client
from localcluster.metricsstack.load import (
    TINY_ARCHITECTURE,
    delete_llmds,
    tiny_llmd,
    wait_free_gpus,
)
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models import DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE
from llmfleet.render.names import HTTP_PORT

from . import localnode
from .causerows import (
    PLURALS,
    Outcome,
    Row,
    Step,
    World,
    apply_until_named,
    cause_gone,
    claim,
    claims_bound,
    configmap,
    delete_node,
    engine,
    get,
    gpu_node,
    recovered,
    secret,
    unbound_claim,
    volume_for,
    wait_all,
    warnings,
)
from .harness import (
    E2E_GPU_PRODUCT,
    TEST_NAMESPACE_LABEL,
    Operator,
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
CLAIMS_BIND_WITHIN = 30.0  # the volume controller binds a claim to its named volume in a second
LATE_PODS_GONE_WITHIN = 60.0  # kwok ends a deleted pod in a second or two


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


@pytest.fixture(scope="module")
def outcomes(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
    engine_rows: Future[dict[str, Served]],
) -> Iterator[dict[str, Outcome]]:
    """Every row's resource applied at once, named, fixed at once and recovered: each row's
    outcome, for the tests below to judge. The engine rows (`engine_rows`) run meanwhile: these
    wait on the scheduler, kwok and the operator, those on the node runner's engines."""
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
            claims_bound(w, CLAIMS_BIND_WITHIN)

            def shown(name: str) -> bool:
                if ROWS[name].kind == "LLMDeployment":  # what a person reads without -o yaml
                    found[name].shown = cluster.kubectl("get", "llmd", name, "-n", ns)
                return True

            started = time.monotonic()
            apply_until_named(w, ROWS, {n: n for n in ROWS}, found, SAID_WITHIN, shown)
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
            events = warnings(w)
            for name, row in ROWS.items():
                found[name].warnings = len(events.get((row.kind, name, row.reason), []))
            yield found
        finally:
            _leave_no_pod_on_the_late_nodes(w)
            for name, row in ROWS.items():
                if row.undo is not None:
                    row.undo(w, name)
            for pv in w.core.list_persistent_volume(
                label_selector=f"{TEST_NAMESPACE_LABEL}={ns}"
            ).items:
                w.core.delete_persistent_volume(pv.metadata.name)


def _leave_no_pod_on_the_late_nodes(w: World) -> None:
    """Deletes the rows' resources whose pods the fix put on a GPU node of their own, and waits
    until those pods are gone: a node deleted under a pod leaves it Terminating with no kubelet
    to end it, holding the namespace's deletion until the pod garbage collector's orphan sweep
    (78 s here)."""
    for name, row in ROWS.items():
        if row.undo is not None:
            with contextlib.suppress(client.ApiException):
                client.CustomObjectsApi(w.api).delete_namespaced_custom_object(
                    GROUP, VERSION, w.namespace, PLURALS[row.kind], name
                )
    nodes = {f"kwok-{pool}-0" for pool in LATE_POOLS.values()}

    def left() -> list[str]:
        pods = w.core.list_namespaced_pod(w.namespace).items
        return [p.metadata.name for p in pods if p.spec.node_name in nodes]

    try:
        wait_until(lambda: not left(), timeout=LATE_PODS_GONE_WITHIN, interval=0.5)
    except AssertionError:
        print(f"still on the late nodes after {LATE_PODS_GONE_WITHIN:.0f} s: {left()}")


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


def serve_engine_rows(w: World, names: dict[str, str]) -> dict[str, Served]:
    """Both engine rows applied at once on the node runner, named, fixed and serving."""
    found = {row: Served() for row in ENGINE_ROWS}

    def kubelet_said(row: str) -> bool:
        pod = engine_pod(w, names[row])
        waiting = pod.status.container_statuses[0].state.waiting if pod else None
        if waiting is None:
            return False
        found[row].waiting = (waiting.reason, waiting.message or "")
        return True

    started = time.monotonic()
    outcomes = {row: found[row].outcome for row in ENGINE_ROWS}
    apply_until_named(w, ENGINE_ROWS, names, outcomes, SAID_WITHIN, kubelet_said)
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
    return found


@pytest.fixture(scope="module")
def engine_rows(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    node_runner: str,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
) -> Iterator[Future[dict[str, Served]]]:
    """The engine rows, run on a thread of their own from the module's start (`outcomes` asks for
    them first), their LLMDeployments deleted at the end."""
    wait_free_gpus(client.CoreV1Api(api), node_runner, NODE_GPUS)
    names = {row: str(r.body["metadata"]["name"]) for row, r in ENGINE_ROWS.items()}
    with (
        fresh_namespace(api, "engines-cannot-run", test_namespaces, finish_namespace) as ns,
        ThreadPoolExecutor(1) as pool,
    ):
        running = pool.submit(serve_engine_rows, World(api, cluster, ns), names)
        try:
            yield running
        finally:
            with contextlib.suppress(Exception):  # what it raised, `served` raised already
                running.result()
            with contextlib.suppress(client.ApiException):
                delete_llmds(api, ns, names.values())


@pytest.fixture(scope="module")
def served(engine_rows: Future[dict[str, Served]]) -> dict[str, Served]:
    return engine_rows.result()


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
