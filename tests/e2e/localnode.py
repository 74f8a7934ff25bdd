"""The node runner's `local-gpu-0` for the e2e tests that run real pods (vLLM engines, the vLLM
Router, LLMBatchJob shards): started for a module, or reused when another module left it
running, as long as it runs the current runner code."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from kubernetes import client
from localcluster.metricsstack.load import wait_until
from localcluster.noderunner.node import FEATURES, FEATURES_ANNOTATION, GPU_RESOURCE
from localcluster.supervisor import REPO, Cluster

NODE = "local-gpu-0"
INSTALL_VLLM = REPO / "dev" / "dataplane" / "install-vllm.sh"
INSTALL_ROUTER = REPO / "dev" / "dataplane" / "install-vllm-router.sh"


def vllm_python() -> Path:
    """The vLLM virtualenv's python (installed first if needed: minutes, once per machine)."""
    out = subprocess.run([str(INSTALL_VLLM)], check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


@contextlib.contextmanager
def local_node(cluster: Cluster, gpus: int, exactly: bool = False) -> Iterator[str]:
    """`local-gpu-0` with `gpus` GPU slots (the router virtualenv installed too). A runner left
    by another module is reused (with `exactly`, only if it has `gpus` slots: for a test that
    fills the node); on the way out, a runner this call started is stopped once the
    pods on it have drained (a pod left Terminating without its kubelet would hold its GPU when
    the runner next starts)."""
    subprocess.run([str(INSTALL_ROUTER)], check=True, stdout=subprocess.DEVNULL)
    was_running = cluster.alive("node-runner")
    if was_running and not _runner_is_current(cluster, gpus if exactly else None):
        # A runner from older code lacks features the tests need; one of another size, the GPUs.
        cluster.stop_node_runner()
        was_running = False
    node = cluster.start_node_runner(gpus=gpus)
    yield node
    if was_running or not cluster.alive("node-runner"):
        return
    from kubernetes import config

    core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: (
                not core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            ),
            150,
            1,
        )
    cluster.stop_node_runner()


def _runner_is_current(cluster: Cluster, gpus: int | None) -> bool:
    try:
        out = cluster.kubectl("get", "node", NODE, "-o", "json")
    except subprocess.CalledProcessError:
        return True  # no node yet: whatever runs will register the current one
    node = json.loads(out)
    annotations = node["metadata"].get("annotations") or {}
    slots = (node.get("status") or {}).get("capacity", {}).get(GPU_RESOURCE)
    sized = gpus is None or slots == str(gpus)
    return bool(annotations.get(FEATURES_ANNOTATION) == FEATURES and sized)
