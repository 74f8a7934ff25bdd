"""The node runner's Node: its configuration, the Node object it registers (capacity, GPU labels,
taint) and the heartbeats that keep it Ready (Node status and a Lease in kube-node-lease)."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import gpurequest
from .container import timestamp
from .ipam import POD_NETWORK
from .realgpus import RealGpus

# runner.py's logger: the Node's log lines stay under the name they had in runner.py.
log = logging.getLogger("noderunner")

NODE_NAME = "local-gpu-0"
GPU_PRODUCT = "LLMFleet-CPU-Emulated"
GPU_RESOURCE = gpurequest.GPU_RESOURCE
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
# A node for what a cluster runs beside its GPU pools (the operator's own pod): no GPUs, and a
# taint of its own so that only pods placed here on purpose land on it (others would really run).
SYSTEM_TAINT = {"key": "llmfleet.dev/system", "value": "true", "effect": "NoSchedule"}
HEARTBEAT_SECONDS = 10
LEASE_SECONDS = 40
FIELD_MANAGER = "llmfleet-node-runner"
# What this runner emulates beyond the basics, on its Node: a test can tell a runner started from
# older code (still running from an earlier session) and restart it.
FEATURES_ANNOTATION = "llmfleet.dev/node-runner-features"
FEATURES = (
    "volumes,termination-message,llmfleet-pythonpath,fieldref-metadata-maps,router,oci-containers,"
    "kubelet-refusals,engine-stand-in,readiness-gates,image-pulls,start-errors,memory-limits"
)


# Pods without a GPU a lab puts on this node beside the engines: routers, a benchmark's ballast.
NON_GPU_PODS = 8


@dataclass
class Config:
    state_dir: Path
    vllm_venv: Path
    kubeconfig: Path
    node: str = NODE_NAME
    gpus: int = 4
    cpu: str = "16"
    memory: str = "64Gi"
    # At least: a node with more GPUs than that takes a pod per GPU and the non-GPU ones beside.
    max_pods: int = 16
    pod_network: str = POD_NETWORK  # loopback only
    # A system node (SYSTEM_TAINT, no GPU labels or capacity) rather than a GPU node.
    system: bool = False
    models: dict[str, str] = field(default_factory=dict)  # extra model-table entries
    # The machine's real GPUs (realgpus.py, dev/gpulab) instead of CPU-emulated slots.
    real_gpus: RealGpus | None = None

    @property
    def python(self) -> Path:
        if self.real_gpus is not None:
            return self.real_gpus.python
        return self.vllm_venv / "bin" / "python"

    @property
    def model_table_file(self) -> Path:
        """Tests may write {"name": "/dir"} here; read at every container start."""
        return self.state_dir / "node-runner-models.json"


class NodeRegistration:
    """The part of Runner (runner.py) that registers its Node and keeps it Ready; Runner's
    __init__ sets what is declared here."""

    cfg: Config
    core: client.CoreV1Api
    coord: client.CoordinationV1Api
    stop: threading.Event
    node_uid: str
    _since: str

    @property
    def gpu_count(self) -> int:
        real = self.cfg.real_gpus
        return len(real.indices) if real else self.cfg.gpus

    def node_manifest(self) -> dict[str, Any]:
        c = self.cfg
        real = c.real_gpus
        capacity = {
            "cpu": c.cpu,
            "memory": c.memory,
            "pods": str(max(c.max_pods, self.gpu_count + NON_GPU_PODS)),
            "ephemeral-storage": "100Gi",
            **({} if c.system else {GPU_RESOURCE: str(self.gpu_count)}),
        }
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": c.node,
            "type": "local-runner",
        }
        if c.system:
            labels["llmfleet.dev/pool"] = "system"
        else:
            labels |= {
                "llmfleet.dev/pool": "local",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(self.gpu_count),
                "nvidia.com/gpu.product": real.product if real else GPU_PRODUCT,
                "nvidia.com/gpu.memory": str(real.memory_mib) if real else "16384",
            }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": c.node,
                "annotations": {FEATURES_ANNOTATION: FEATURES},
                "labels": labels,
            },
            # Like a GPU node pool (GKE taints its GPU nodes this way): only pods that tolerate
            # nvidia.com/gpu land here, which every GPU pod the operator renders does. Untainted,
            # any CPU-only pod without a nodeSelector (benchmarks, other tests) would be run here
            # as a real vLLM process. The system node is tainted for the same reason.
            "spec": {"taints": [SYSTEM_TAINT if c.system else GPU_TAINT]},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": c.node},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "v1.34.4-llmfleet-noderunner",
                    "kubeProxyVersion": "",
                    "containerRuntimeVersion": "localproc://0",
                    "osImage": "llmfleet node runner",
                    "kernelVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            },
        }

    def _conditions(self) -> list[dict[str, Any]]:
        now = timestamp()
        base = {"lastHeartbeatTime": now, "lastTransitionTime": self._since}
        return [
            {**base, "type": "MemoryPressure", "status": "False", "reason": "Local"},
            {**base, "type": "DiskPressure", "status": "False", "reason": "Local"},
            {**base, "type": "PIDPressure", "status": "False", "reason": "Local"},
            {
                **base,
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "llmfleet node runner is posting ready status",
            },
        ]

    def register(self) -> None:
        self._since = timestamp()
        manifest = self.node_manifest()
        try:
            node = self.core.create_node(manifest, field_manager=FIELD_MANAGER)
        except ApiException as e:
            if e.status != 409:
                raise
            node = self.core.patch_node(
                self.cfg.node,
                {"metadata": manifest["metadata"], "spec": manifest["spec"]},
                field_manager=FIELD_MANAGER,
            )
        self.node_uid = node.metadata.uid
        self.heartbeat()
        log.info("node %s registered (%d GPU slots)", self.cfg.node, self.gpu_count)

    def heartbeat(self) -> None:
        status = self.node_manifest()["status"] | {"conditions": self._conditions()}
        self.core.patch_node_status(
            self.cfg.node, {"status": status}, field_manager=FIELD_MANAGER, _request_timeout=10
        )
        renew = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.cfg.node,
                "namespace": "kube-node-lease",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.cfg.node,
                        "uid": self.node_uid,
                    }
                ],
            },
            "spec": {
                "holderIdentity": self.cfg.node,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": renew,
            },
        }
        try:
            self.coord.patch_namespaced_lease(
                self.cfg.node, "kube-node-lease", lease, _request_timeout=10
            )
        except ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", lease, _request_timeout=10)

    def _heartbeats(self) -> None:
        while not self.stop.wait(HEARTBEAT_SECONDS):
            try:
                self.heartbeat()
            except Exception as e:
                log.warning("heartbeat failed: %s", e)
                if isinstance(e, ApiException) and e.status == 404:
                    with contextlib.suppress(Exception):
                        self.register()  # someone deleted the Node: register it again
