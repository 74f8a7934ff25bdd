"""Fake nodes as Kubernetes objects, built from a node-pool profile."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_PREFIX = "kwok-"  # every kwok node's name starts so (the kwok gate's nodes)


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
