"""Load on an LLMDeployment's engine pods from the test side: a thread keeps a file listing the
Ready pods (not being deleted) current, and load generators (loadgen.py, run with the vLLM
virtualenv's python for its `openai` package) send requests round robin over them."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.deployment import KIND
from llmfleet.models.deployment import PLURAL as LLMD_PLURAL

from ..waiting import wait_until

LOADGEN = Path(__file__).resolve().parent / "loadgen.py"
ENGINE_PORT = 8000
GROUP, VERSION, PLURAL = API_GROUP, API_VERSION, LLMD_PLURAL
PRODUCT = "LLMFleet-CPU-Emulated"  # the node runner's GPU product label
GPU = "nvidia.com/gpu"


def pod_ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@dataclass
class Generator:
    proc: subprocess.Popen[str]
    out: Path
    stop_file: Path

    def ask_to_stop(self) -> None:
        """No new requests from now on; those in flight finish or time out."""
        self.stop_file.touch()

    def stop(self, timeout: float = 180) -> None:
        """Ask it to stop and wait until its requests in flight are done."""
        self.ask_to_stop()
        self.wait(timeout)

    def wait(self, timeout: float = 180) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def running(self) -> bool:
        return self.proc.poll() is None

    def records(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]


@dataclass
class EngineLoad:
    """Ready engine pods of `selector` in `namespace`, refreshed every `interval` seconds."""

    api: client.ApiClient
    namespace: str
    selector: str
    python: Path  # the vLLM virtualenv's python
    workdir: Path
    # Listing pods costs the API server and this (test) process CPU that the engines' API
    # servers need on a 2-core machine; the targets (router pods, one engine) rarely change.
    interval: float = 2.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _generators: list[Generator] = field(default_factory=list)
    ready_pods: dict[str, str] = field(default_factory=dict)  # name -> IP

    @property
    def targets(self) -> Path:
        return self.workdir / "targets.json"

    def __enter__(self) -> EngineLoad:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.refresh()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for g in self._generators:
            if g.running():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    g.stop(timeout=60)
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    def refresh(self) -> dict[str, str]:
        pods = (
            client.CoreV1Api(self.api)
            .list_namespaced_pod(self.namespace, label_selector=self.selector)
            .items
        )
        ready = {
            p.metadata.name: p.status.pod_ip
            for p in pods
            if pod_ready(p) and not p.metadata.deletion_timestamp and p.status.pod_ip
        }
        if ready != self.ready_pods or not self.targets.exists():
            doc = {"pods": [{"name": n, "ip": ip, "port": ENGINE_PORT} for n, ip in ready.items()]}
            tmp = self.targets.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            tmp.rename(self.targets)
            self.ready_pods = ready
        return ready

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # an API hiccup: keep the last list
                self.refresh()

    def start(
        self,
        name: str,
        concurrency: int,
        duration: float,
        max_tokens: int = 64,
        timeout: float = 120,
        requests: int = 0,
        targets: Path | None = None,
        start_at: float = 0.0,
    ) -> Generator:
        """A load generator on the Ready pods (or on the pods `targets` lists)."""
        out = self.workdir / f"{name}.jsonl"
        stop_file = self.workdir / f"{name}.stop"
        out.unlink(missing_ok=True)
        stop_file.unlink(missing_ok=True)
        with open(self.workdir / f"{name}.stderr", "w") as stderr:
            proc = subprocess.Popen(
                [
                    str(self.python),
                    str(LOADGEN),
                    f"--targets={targets or self.targets}",
                    f"--start-at={start_at}",
                    f"--out={out}",
                    f"--concurrency={concurrency}",
                    f"--duration={duration}",
                    f"--requests={requests}",
                    f"--stop-file={stop_file}",
                    f"--max-tokens={max_tokens}",
                    f"--timeout={timeout}",
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        gen = Generator(proc, out, stop_file)
        self._generators.append(gen)
        return gen


# spec.model.architecture of the tiny random Llama (dev/dataplane/tiny_model.py).
TINY_ARCHITECTURE: dict[str, Any] = {
    "parametersBillions": 0.001,
    "numLayers": 2,
    "numAttentionHeads": 2,
    "numKeyValueHeads": 1,
    "headDim": 64,
    "maxPositionEmbeddings": 2048,
}


# spec.model of the tiny model, by a name the node runner's model table maps to it.
TINY_MODEL: dict[str, Any] = {"name": "llmfleet-test/tiny-llama", "architecture": TINY_ARCHITECTURE}
# spec.gpus of one of the node runner's emulated GPUs.
TINY_GPUS: dict[str, Any] = {"count": 1, "memoryGiB": 16, "perNode": 4, "product": PRODUCT}


def tiny_spec(**fields: Any) -> dict[str, Any]:
    """The spec of an LLMDeployment of the tiny test model on one of the node runner's GPUs:
    the one builder of it, for the dev tools, the benchmarks and every test tier. Each keyword
    replaces the top-level field of its name; None drops it (`gpus=None`: a CPU engine)."""
    spec: dict[str, Any] = {
        "model": {**TINY_MODEL, "architecture": dict(TINY_ARCHITECTURE)},
        "gpus": dict(TINY_GPUS),
        "engine": {"maxModelLen": 512, "maxNumSeqs": 2},
        "autoscaling": {},
    }
    spec.update(fields)
    return {key: value for key, value in spec.items() if value is not None}


def tiny_llmd(
    name: str,
    max_num_seqs: int = 2,
    *,
    spec: Mapping[str, Any] | None = None,
    **autoscaling: Any,
) -> dict[str, Any]:
    """An LLMDeployment of the tiny test model whose pods land on the node runner's node, with
    spec.autoscaling of the other keywords; `spec`: top-level fields to replace (tiny_spec's)."""
    fields = {
        "engine": {"maxModelLen": 512, "maxNumSeqs": max_num_seqs},
        "autoscaling": autoscaling,
        **(spec or {}),
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": tiny_spec(**fields),
    }


def delete_llmd(api: client.ApiClient, namespace: str, name: str, timeout: float = 180) -> None:
    """Delete an LLMDeployment and wait until its pods (engines, router) are gone, so the next
    test or run finds the node runner's GPUs free (idle engines drain in seconds)."""
    delete_llmds(api, namespace, [name], timeout)


def delete_llmds(
    api: client.ApiClient, namespace: str, names: Iterable[str], timeout: float = 180
) -> None:
    """Delete LLMDeployments all at once and wait until all their pods are gone: each engine's
    preStop sleep (10 s) then runs beside the others' rather than after them. One already
    deleted counts as deleted."""
    names = list(names)
    custom = client.CustomObjectsApi(api)
    for name in names:
        try:
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except client.ApiException as e:
            if e.status != 404:
                raise
    core = client.CoreV1Api(api)
    selector = f"llmfleet.dev/deployment in ({','.join(names)})"
    wait_until(
        lambda: not core.list_namespaced_pod(namespace, label_selector=selector).items,
        timeout,
        1,
        f"{', '.join(names)}'s pods gone",
    )


def free_gpus(core: client.CoreV1Api, node: str) -> int:
    alloc, holders = _gpu_use(core, node)
    return alloc - sum(holders.values())


def wait_free_gpus(core: client.CoreV1Api, node: str, count: int, timeout: float = 150) -> int:
    """The free GPUs on `node` once at least `count` are free (pods of an earlier test may still
    be draining); after `timeout` s, AssertionError naming the pods that hold them."""
    try:
        return int(wait_until(lambda: (n := free_gpus(core, node)) >= count and n, timeout, 2))
    except AssertionError:
        alloc, holders = _gpu_use(core, node)
        held = ", ".join(f"{pod} ({n})" for pod, n in holders.items()) or "no pod"
        raise AssertionError(
            f"{count} free GPUs on {node} not met within {timeout:.0f}s: it has {alloc}, held by "
            f"{held}"
        ) from None


def _gpu_use(core: client.CoreV1Api, node: str) -> tuple[int, dict[str, int]]:
    """`node`'s allocatable GPUs, and the GPUs each pod bound to it holds (namespace/name, phase,
    and whether it is being deleted)."""
    alloc = int((core.read_node(node).status.allocatable or {}).get(GPU, "0"))
    holders: dict[str, int] = {}
    for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
        if p.status.phase in ("Succeeded", "Failed"):
            continue
        n = sum(
            int(((c.resources and c.resources.limits) or {}).get(GPU, "0"))
            for c in p.spec.containers
        )
        if n:
            deleting = ", deleting" if p.metadata.deletion_timestamp else ""
            holders[f"{p.metadata.namespace}/{p.metadata.name} {p.status.phase}{deleting}"] = n
    return alloc, holders


def exactly_free_gpus(core: client.CoreV1Api, namespace: str, node: str, count: int) -> None:
    """For a benchmark: `count` GPUs of `node` free now (RuntimeError otherwise), and any beyond
    them held by a pod in `namespace`, so that it runs on exactly `count`."""
    free = free_gpus(core, node)
    if free < count:
        raise RuntimeError(f"{node} has {free} free GPUs; the benchmark needs {count}")
    if free > count:
        hold_gpus(core, namespace, free - count)


def hold_gpus(core: client.CoreV1Api, namespace: str, count: int) -> None:
    """A node runner started by someone else may have more GPUs than NODE_GPUS: hold the rest
    with a pod whose container is a plain `sleep` (the runner runs it as a process)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-ballast"},
        "spec": {
            "containers": [
                {
                    "name": "sleep",
                    "image": "busybox",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {GPU: str(count)}},
                }
            ],
            "nodeSelector": {"nvidia.com/gpu.product": PRODUCT},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
        },
    }
    core.create_namespaced_pod(namespace, pod)
    wait_until(
        lambda: core.read_namespaced_pod("gpu-ballast", namespace).status.phase == "Running",
        60,
        what="the GPU ballast pod Running",
    )


def summarize(records: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {"ok": 0, "retryable": 0, "error": 0}
    for r in records:
        out[r["outcome"]] = out.get(r["outcome"], 0) + 1
    return out
