"""Operator failover: two replicas of the chart's operator on the local cluster, the leader
SIGKILLed while an LLMDeployment changes, five times; the time from the kill to the standby's
first write of that change (`operator_failover_s`), and to its taking the Lease."""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from kubernetes import client
from kubernetes import config as k8s_config
from localcluster.failover import kill_leader
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from localcluster.operator_process import Operator
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL

RUNS = 5
SPEC: dict[str, Any] = {
    "model": {"name": "/models/tiny", "architecture": dict(TINY_ARCHITECTURE)},
    "engine": {"maxModelLen": 512, "cpuKVCacheGiB": 1},
    "autoscaling": {"enabled": False},
}


def run() -> dict[str, float]:
    cluster = Cluster()
    started = cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-failover-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    a = Operator(cluster)
    a.install_identity()
    a.start()
    b = a.replica("operator-b")
    b.start(wait_leading=False)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "ha"}}
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, {**body, "spec": SPEC})
    times, leases = [], []
    try:
        leader, standby = a, b
        for i in range(RUNS):
            wait_until(standby.health_ok, timeout=60, what=f"{standby.name} ready")

            def change(i: int = i) -> None:
                spec = {**SPEC, "engine": {**SPEC["engine"], "maxModelLen": 256 + i}}
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, "ha", {"spec": spec}
                )

            failover = kill_leader(leader, standby, change, first_write_in=ns)
            times.append(failover.first_write_s)
            leases.append(failover.lease_taken_s)
            print(
                f"   run {i + 1}: lease {failover.lease_taken_s:.1f} s, "
                f"first write {failover.first_write_s:.1f} s",
                flush=True,
            )
            leader.start(wait_leading=False)  # back as the standby
            leader, standby = standby, leader
    finally:
        b.stop()
        a.kill()
        core.delete_namespace(ns)
        if started:
            cluster.down()
    return {
        "operator_failover_s": statistics.median(times),
        "operator_failover_max_s": max(times),
        "operator_failover_lease_s": statistics.median(leases),
    }
