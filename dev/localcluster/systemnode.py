"""`local-system-0`: a second node runner for the pods a cluster runs beside its GPU pools, the
chart's operator pod above all.

The GPU node runner (`local-gpu-0`) is started and stopped by the data-plane tests with the GPU
slots each needs; the operator pod must outlive those restarts, as an operator on a system node
pool outlives a GPU pool's scale-down. This node has no GPUs and a taint of its own
(noderunner.node.SYSTEM_TAINT), so nothing lands on it unless placed there on purpose.
"""

from __future__ import annotations

import subprocess

from . import nodes
from .noderunner.node import SYSTEM_TAINT
from .supervisor import CLUSTER_INDEX, REPO, Cluster

NODE = "local-system-0"
NAME = "system-node"  # pidfile and log stem
# Loopback pod IPs of its own: 127.16 (kwok), .17 (GPU runner), .18-.20 (own clusters of tests).
POD_NETWORK = f"127.{21 + 10 * CLUSTER_INDEX}.0.0/16"
TOLERATION = {"key": SYSTEM_TAINT["key"], "operator": "Exists", "effect": SYSTEM_TAINT["effect"]}
NODE_SELECTOR = {"kubernetes.io/hostname": NODE}


def start_system_node(cluster: Cluster, timeout: float = 120) -> str:
    """Start `local-system-0` unless it runs; return its name once it is Ready."""
    if not cluster.alive(NAME):
        venv = subprocess.run(
            [str(REPO / "dev" / "dataplane" / "install-vllm.sh"), "--print-path"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        cluster.start_dev_process(
            NAME,
            "localcluster.noderunner",
            f"--vllm-venv={venv}",
            f"--node={NODE}",
            "--system",
            "--gpus=0",
            f"--pod-network={POD_NETWORK}",
        )
    return nodes.wait_ready(cluster.procs, cluster.api, NAME, NODE, timeout)
