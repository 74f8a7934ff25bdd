"""Reconciler figures on the local cluster, with the real operator process:
apply→children latency, 500 resources at once, operator memory, and API writes while idle (500
LLMDeployments and 20 LLMBatchJobs whose pods wait)."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes import config as k8s_config
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from localcluster.operator_process import Operator, utcnow
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.batchjob import KIND as BATCH_KIND
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import KIND, PLURAL

RESYNC_SECONDS = 30.0
IDLE_WINDOW_SECONDS = 60.0
BATCH_JOBS = 20


def tiny(name: str) -> dict[str, Any]:
    """A CPU-only model small enough that the benchmark measures the operator, not the nodes."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": "/models/tiny",
                "architecture": dict(TINY_ARCHITECTURE),
            },
            "engine": {
                "maxModelLen": 512,
                "cpuKVCacheGiB": 1,
                "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            },
            "autoscaling": {"enabled": False},
        },
    }


def waiting_batch_job(name: str) -> dict[str, Any]:
    """An LLMBatchJob whose pods wait for GPUs no node has: idle, but polled."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": BATCH_KIND,
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "/models/tiny", "architecture": dict(TINY_ARCHITECTURE)},
            "gpus": {"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"},
            "engine": {"maxModelLen": 512},
            "input": {"configMap": {"name": "prompts", "key": "prompts.jsonl"}},
            "output": {"persistentVolumeClaim": {"claimName": "results", "path": name}},
        },
    }


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class DeploymentWatcher:
    """Records when each Deployment first appears (the watch event, not a poll)."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self._w = watch.Watch()
        self._apps = client.AppsV1Api(api)
        self._ns = namespace
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        for event in self._w.stream(
            self._apps.list_namespaced_deployment, self._ns, timeout_seconds=600
        ):
            name = event["object"].metadata.name
            self.seen.setdefault(name, time.monotonic())

    def stop(self) -> None:
        self._w.stop()


def run() -> dict[str, float]:
    cluster = Cluster()
    started = cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    op = Operator(cluster, resync_seconds=RESYNC_SECONDS)
    op.install_identity()
    op.start()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-reconcile-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    figures: dict[str, float] = {}
    try:
        watcher = DeploymentWatcher(api, ns)
        time.sleep(1)
        latencies = []
        for i in range(50):
            name = f"lat-{i}"
            t0 = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, tiny(name))
            wait_until(
                lambda n=f"{name}-cpu": n in watcher.seen,
                timeout=60,
                interval=0.005,
                what=f"{name} children",
            )
            latencies.append((watcher.seen[f"{name}-cpu"] - t0) * 1000)
        watcher.stop()
        figures["reconcile_p50_ms"] = percentile(latencies, 0.50)
        figures["reconcile_p99_ms"] = percentile(latencies, 0.99)

        names = [f"many-{i}" for i in range(500)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda n: custom.create_namespaced_custom_object(
                        GROUP, VERSION, ns, PLURAL, tiny(n)
                    ),
                    names,
                )
            )

        def all_reconciled() -> bool:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
            done = [
                o
                for o in items
                if o["metadata"]["name"].startswith("many-")
                and (o.get("status") or {}).get("observedGeneration") == 1
            ]
            return len(done) == len(names)

        wait_until(all_reconciled, timeout=1200, interval=1, what="500 reconciled")
        figures["reconcile_500_total_s"] = time.monotonic() - t0
        assert op.proc is not None
        figures["operator_rss_mib_500"] = rss_mib(op.proc.pid)

        # LLMBatchJobs whose pods wait for GPUs no node has: polled every 10 s, never written.
        for i in range(BATCH_JOBS):
            custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, BATCH_PLURAL, waiting_batch_job(f"wait-{i}")
            )
        wait_until(
            lambda: all(
                (o.get("status") or {}).get("shardStatus")
                for o in custom.list_namespaced_custom_object(GROUP, VERSION, ns, BATCH_PLURAL)[
                    "items"
                ]
            ),
            timeout=120,
            interval=1,
            what="the batch jobs' status",
        )

        # Idle: let pod churn settle, then count every write the operator makes in a window that
        # spans two resyncs of all 550 LLMDeployments and six polls of the LLMBatchJobs.
        quiet_since = utcnow()
        time.sleep(30)
        while op.writes_since(quiet_since):
            quiet_since = utcnow()
            time.sleep(10)
        since = utcnow()
        time.sleep(IDLE_WINDOW_SECONDS)
        writes = op.writes_since(since, leases=True)
        renewals = [w for w in writes if (w.get("objectRef") or {}).get("resource") == "leases"]
        figures["idle_writes_per_min"] = (len(writes) - len(renewals)) * 60 / IDLE_WINDOW_SECONDS
        figures["lease_renewals_per_min"] = len(renewals) * 60 / IDLE_WINDOW_SECONDS
    finally:
        op.kill()
        core.delete_namespace(ns)
        if started:
            cluster.down()
    return figures
