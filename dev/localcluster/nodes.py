"""The cluster's nodes: kwok's fake ones as Kubernetes objects built from a node-pool profile,
applied and waited for until kwok reports them Ready, and the node runner's local-gpu-0, whose
pods really run (dev/localcluster/noderunner)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .api import FIELD_MANAGER, Api, dump
from .processes import Processes
from .tools import REPO

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_PREFIX = "kwok-"  # every kwok node's name starts so (the kwok gate's nodes)
RUNNER, RUNNER_NODE = "node-runner", "local-gpu-0"  # the node runner's process, its node


@dataclass(frozen=True)
class Pool:
    name: str
    count: int
    gpus: int = 0
    product: str = ""
    gpu_memory_mib: int = 0
    cpu: str = "32"
    memory: str = "128Gi"
    pods: int = 110

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pool:
        return cls(
            name=d["name"],
            count=int(d["count"]),
            gpus=int(d.get("gpus", 0)),
            product=str(d.get("product", "")),
            gpu_memory_mib=int(d.get("gpuMemoryMiB", 0)),
            cpu=str(d.get("cpu", "32")),
            memory=str(d.get("memory", "128Gi")),
            pods=int(d.get("pods", 110)),
        )


def load_profile(path: Path) -> list[Pool]:
    doc = yaml.safe_load(path.read_text())
    return [Pool.from_dict(p) for p in doc["pools"]]


def node_manifests(pool: Pool) -> list[dict[str, Any]]:
    """One Node object per pool member, as kwok expects them (status included)."""
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "type": "kwok",
        "llmfleet.dev/pool": pool.name,
    }
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
    if pool.gpus:
        capacity[GPU_RESOURCE] = str(pool.gpus)
        labels |= {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(pool.gpus),
            "nvidia.com/gpu.product": pool.product,
            "nvidia.com/gpu.memory": str(pool.gpu_memory_mib),
        }
    nodes = []
    for i in range(pool.count):
        name = f"{KWOK_NODE_PREFIX}{pool.name}-{i}"
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": labels | {"kubernetes.io/hostname": name},
                },
                "spec": {},
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "nodeInfo": {
                        "architecture": "amd64",
                        "operatingSystem": "linux",
                        "kubeletVersion": "fake",
                        "kubeProxyVersion": "fake",
                    },
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                },
            }
        )
    return nodes


def apply(api: Api, pools: list[Pool]) -> None:
    docs = [n for p in pools for n in node_manifests(p)]
    api.kubectl(
        "apply",
        "--server-side",
        f"--field-manager={FIELD_MANAGER}",
        "-f",
        "-",
        input=dump(docs),
    )


def ready(node: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])
    )


def wait_kwok_ready(api: Api, timeout: float = 60) -> None:
    """Wait until every kwok node is Ready (the node runner's node reports for itself)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes = [
            n
            for n in json.loads(api.kubectl("get", "nodes", "-o", "json"))["items"]
            if (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"
        ]
        if nodes and all(ready(n) for n in nodes):
            return
        time.sleep(0.3)
    raise TimeoutError("nodes not Ready; see kwok.log")


def start_runner(procs: Processes, api: Api, gpus: int, pod_network: str, timeout: float) -> str:
    """Start the node runner (vLLM installed first if needed: minutes, once) unless it runs;
    wait until its node is Ready and return the node's name."""
    install = REPO / "dev" / "dataplane" / "install-vllm.sh"
    venv = subprocess.run([str(install)], check=True, stdout=subprocess.PIPE, text=True)
    if not procs.alive(RUNNER):
        procs.start_dev(
            RUNNER,
            "localcluster.noderunner",
            f"--vllm-venv={venv.stdout.strip().splitlines()[-1]}",
            f"--gpus={gpus}",
            f"--pod-network={pod_network}",
        )
    return wait_ready(procs, api, RUNNER, RUNNER_NODE, timeout)


def wait_ready(procs: Processes, api: Api, name: str, node: str, timeout: float) -> str:
    """Wait until the runner started under `name` has its `node` Ready; return the node's name.
    RuntimeError if the runner exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check(name)
        with contextlib.suppress(subprocess.CalledProcessError):
            if ready(json.loads(api.kubectl("get", "node", node, "-o", "json"))):
                return node
        time.sleep(0.5)
    raise TimeoutError(f"node {node} not Ready after {timeout}s; see {procs.log(name)}")
