"""Cluster figures: a cold build of every component, and a warm start of the control plane."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from localcluster.supervisor import BUILD_TOOLS, CLUSTER_INDEX, Cluster, Ports

from bench import results

# Ports apart from the developer's cluster, which may be running.
BENCH_PORTS = Ports(
    apiserver=26443 + 1000 * CLUSTER_INDEX,
    etcd_client=22379 + 1000 * CLUSTER_INDEX,
    etcd_peer=22380 + 1000 * CLUSTER_INDEX,
    controller_manager=20257 + 1000 * CLUSTER_INDEX,
    scheduler=20259 + 1000 * CLUSTER_INDEX,
    kwok=20247 + 1000 * CLUSTER_INDEX,
    lws_webhook=20263 + 1000 * CLUSTER_INDEX,
    lws_metrics=20264 + 1000 * CLUSTER_INDEX,
    lws_health=20265 + 1000 * CLUSTER_INDEX,
    keda_metrics=20266 + 1000 * CLUSTER_INDEX,
    keda_health=20267 + 1000 * CLUSTER_INDEX,
    keda_grpc=20268 + 1000 * CLUSTER_INDEX,
    keda_adapter=20269 + 1000 * CLUSTER_INDEX,
    keda_adapter_metrics=20270 + 1000 * CLUSTER_INDEX,
)


def cold_build_seconds() -> float:
    """Every component from empty Go module and build caches, as on a fresh machine."""
    with tempfile.TemporaryDirectory(prefix="llmfleet-cold-") as tmp:
        env = {
            **os.environ,
            "LLMFLEET_CACHE": f"{tmp}/cache",
            "GOCACHE": f"{tmp}/gocache",
            "GOMODCACHE": f"{tmp}/gomod",
        }
        start = time.monotonic()
        subprocess.run([str(BUILD_TOOLS)], check=True, env=env, stdout=subprocess.DEVNULL)
        took = time.monotonic() - start
        # The module cache is read-only by design; make it removable.
        subprocess.run(["chmod", "-R", "u+w", tmp], check=False)
    return took


def warm_start_seconds() -> float:
    with tempfile.TemporaryDirectory(prefix="llmfleet-warm-") as tmp:
        c = Cluster(state_dir=Path(tmp), ports=BENCH_PORTS)
        try:
            return c.up(log=lambda _: None)
        finally:
            c.down()


def run() -> dict[str, float]:
    figures = {"cluster_warm_start_s": warm_start_seconds()}
    if os.environ.get("BENCH_COLD") == "1" or "cluster_cold_build_s" not in results.load():
        figures["cluster_cold_build_s"] = cold_build_seconds()
    return figures
