"""Stall detection's figures on the local cluster (issue 43): a real vLLM engine (the tiny model on
the CPU, node runner) behind the vLLM Router, with `spec.engine.stallDetection.windowSeconds`
at WINDOW_SECONDS, the floor of the derived default (an 8B on one H100 gets about 31 s), its
engine core frozen mid-decode with SIGSTOP (the server and
/health keep answering), RUNS times; each time the operator restarts it and the next run freezes
the new engine.

* `stall_detect_s`: SIGSTOP → the engine is out of the router's rotation (median of RUNS). The
  window counts from the last time the engine's token counters moved, so this is the window plus
  up to a third of it (the operator's poll) and the router's watch.
* `stall_restart_s`: SIGSTOP → the frozen engine's pod is being deleted (a second window later).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
import uuid
from typing import Any

import yaml
from kubernetes import client
from kubernetes import config as k8s_config
from localcluster.metricsstack.load import (
    delete_llmd,
    exactly_free_gpus,
    pod_ready,
    tiny_llmd,
    wait_until,
)
from localcluster.noderunner import procs
from localcluster.operator_process import Operator
from localcluster.routerapi import routed_engines
from localcluster.stall import frozen, keep_decoding, running
from localcluster.supervisor import Cluster

RUNS = 3
WINDOW_SECONDS = 30
NAME = "stall"
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
ROUTERS = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=router"
STARTUP_TIMEOUT = 300


def _one_ready(core: client.CoreV1Api, ns: str, selector: str, what: str) -> client.V1Pod:
    (pod,) = wait_until(
        lambda: [
            p
            for p in core.list_namespaced_pod(ns, label_selector=selector).items
            if pod_ready(p) and p.metadata.deletion_timestamp is None
        ],
        STARTUP_TIMEOUT,
        2,
        what,
    )
    return pod


def freeze_once(core: client.CoreV1Api, ns: str, runner: str) -> dict[str, float]:
    engine = _one_ready(core, ns, ENGINES, "the engine Ready")
    router = _one_ready(core, ns, ROUTERS, "the router Ready")
    ip, rip = engine.status.pod_ip, router.status.pod_ip
    wait_until(lambda: ip in routed_engines(rip), 60, 1, "the router routing to the engine")
    stop = threading.Event()
    with contextlib.ExitStack() as stack:
        stack.callback(stop.set)
        keep_decoding(ip, stop)
        wait_until(lambda: running(ip) >= 1, 60, 0.2, "a request decoding")
        stack.enter_context(frozen(runner, engine.metadata.uid))
        at = time.monotonic()
        stop.set()
        wait_until(lambda: ip not in routed_engines(rip), 180, 0.5, "out of rotation")
        out = time.monotonic() - at

        def deleting() -> bool:
            pods = core.list_namespaced_pod(ns, label_selector=ENGINES).items
            old = [p for p in pods if p.metadata.uid == engine.metadata.uid]
            return not old or old[0].metadata.deletion_timestamp is not None

        wait_until(deleting, 180, 0.5, "the frozen engine deleted")
        restarted = time.monotonic() - at
    print(f"   out of rotation {out:.1f}s after SIGSTOP, deleted {restarted:.1f}s after")
    return {"out": out, "restarted": restarted}


def run() -> dict[str, float]:
    cluster = Cluster()
    cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    was_running = cluster.alive("node-runner")
    node = cluster.start_node_runner(gpus=1)
    op = Operator(cluster)
    op.install_identity()
    op.start()
    core = client.CoreV1Api(api)
    ns = f"bench-stall-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    runs: list[dict[str, float]] = []
    try:
        exactly_free_gpus(core, ns, node, 1)
        body: dict[str, Any] = tiny_llmd(NAME, enabled=False)
        body["spec"]["model"]["servedModelName"] = "tiny"
        body["spec"]["engine"]["stallDetection"] = {"windowSeconds": WINDOW_SECONDS}
        body["spec"]["router"] = {"enabled": True}
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
        runner = procs.runner_id(node, cluster.state_dir)
        for _ in range(RUNS):
            runs.append(freeze_once(core, ns, runner))
        delete_llmd(api, ns, NAME)
    finally:
        core.delete_namespace(ns)
        op.kill()
        if not was_running:
            cluster.stop_node_runner()
    return {
        "stall_detect_s": statistics.median(r["out"] for r in runs),
        "stall_detect_max_s": max(r["out"] for r in runs),
        "stall_restart_s": statistics.median(r["restarted"] for r in runs),
    }
