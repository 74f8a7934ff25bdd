"""The node runner's Node capacity: every GPU slot can hold an engine pod, with room for the
pods without a GPU (routers, a benchmark's ballast) beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from localcluster.noderunner.node import Config, NodeRegistration

CAPACITY = {
    "a few GPUs keep the 16-pod floor": (4, 16),
    "33 GPUs (bench/burst.py) take a pod each and 8 more": (33, 41),
}


@pytest.mark.parametrize(("gpus", "pods"), CAPACITY.values(), ids=CAPACITY.keys())
def test_the_node_admits_a_pod_per_gpu_and_the_non_gpu_pods(
    tmp_path: Path, gpus: int, pods: int
) -> None:
    node = NodeRegistration()
    node.cfg = Config(state_dir=tmp_path, vllm_venv=tmp_path, kubeconfig=tmp_path, gpus=gpus)
    capacity = node.node_manifest()["status"]["capacity"]
    assert capacity["pods"] == str(pods)
    assert capacity["nvidia.com/gpu"] == str(gpus)
