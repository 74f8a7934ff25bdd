"""`local-system-0`: a second node runner for the pods a cluster runs beside its GPU pools, the
chart's operator pod above all.

The GPU node runner (`local-gpu-0`) is started and stopped by the data-plane tests with the GPU
slots each needs; the operator pod must outlive those restarts, as an operator on a system node
pool outlives a GPU pool's scale-down. This node has no GPUs and a taint of its own
(noderunner.runner.SYSTEM_TAINT), so nothing lands on it unless placed there on purpose.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

from .noderunner.runner import SYSTEM_TAINT
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
    pidfile = cluster.state_dir / f"{NAME}.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # (not alive(): right after the fork its command line is still ours)
        if not Path(f"/proc/{pidfile.read_text().strip()}").exists():
            raise RuntimeError(f"{NODE} exited; see {cluster.state_dir / (NAME + '.log')}")
        with contextlib.suppress(subprocess.CalledProcessError):
            got = json.loads(cluster.kubectl("get", "node", NODE, "-o", "json"))
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in got["status"].get("conditions", [])
            ):
                return NODE
        time.sleep(0.5)
    raise TimeoutError(f"node {NODE} not Ready after {timeout}s; see {NAME}.log")
