"""Parked from tests/e2e/test_dataplane.py (see README.md here): `Cluster.down()` leaves no vLLM
or node-runner process behind. In two clean-clone runs a process whose command line names the
test cluster's state directory was still alive right after `down()`; not yet explained."""

from __future__ import annotations

import ipaddress
import subprocess
import tempfile
from pathlib import Path

from e2e.test_dataplane import NODE, start, vllm_deployment
from kubernetes import config
from localcluster.noderunner import procs
from localcluster.supervisor import CLUSTER_INDEX, Cluster, Ports


def test_cluster_down_leaves_no_vllm_or_runner_process(vllm_python: Path) -> None:
    """On a cluster of its own (other ports, another pod network), so that stopping it disturbs
    nobody else's tests on the shared one."""
    state = Path(tempfile.mkdtemp(prefix="llmfleet-down-"))
    c = Cluster(
        state_dir=state,
        ports=Ports(
            apiserver=26443 + 1000 * CLUSTER_INDEX,
            etcd_client=22379 + 1000 * CLUSTER_INDEX,
            etcd_peer=22380 + 1000 * CLUSTER_INDEX,
            controller_manager=20257 + 1000 * CLUSTER_INDEX,
            scheduler=20259 + 1000 * CLUSTER_INDEX,
            kwok=20247 + 1000 * CLUSTER_INDEX,
        ),
    )
    try:
        c.up(log=lambda _: None)
        own_network = f"127.{18 + 10 * CLUSTER_INDEX}.0.0/16"
        c.start_node_runner(gpus=1, pod_network=own_network)
        api = config.new_client_from_config(config_file=str(c.kubeconfig))
        pod = start(api, "default", vllm_deployment("down"))
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(own_network)
        runner = procs.runner_id(NODE, state)
        assert procs.find(procs.marker(runner, pod.metadata.uid))
        runner_pid = int((state / "node-runner.pid").read_text())
        c.down()
        assert not procs.alive(runner_pid)
        assert not [p for p in procs.find(procs.marker(runner)) if procs.alive(p)]
        assert not (state / "node-runner.pid").exists()
        leftovers = subprocess.run(
            ["pgrep", "-f", str(state)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert [p for p in leftovers if procs.alive(int(p))] == []
    finally:
        c.wipe()
