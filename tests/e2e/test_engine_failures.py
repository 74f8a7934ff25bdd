"""Engines that fail, on the real vLLM CPU engine of the node runner's emulated GPU node:

- one asked to load a model that is not there exits at start and is restarted with a back-off
  (CrashLoopBackOff); the LLMDeployment says Degraded=True EngineCrashLoop with its last words;
- one whose engine core is frozen mid-decode (SIGSTOP; its API server and /health still answer)
  leaves the router's rotation within the stall window (spec.engine.stallDetection) and is
  restarted a window later, with Degraded=True EngineStalled and a Warning Event naming it.

Real vLLM on purpose (no engine stand-in): the last words the operator reads and classifies
(not out of memory here) are vLLM's own, which a stand-in would only imitate, and only vLLM has
an engine core apart from the server that keeps answering (tests/README.md, "Real vLLM or the
stand-in")."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack.load import (
    delete_llmd,
    tiny_llmd,
    wait_free_gpus,
    wait_until,
)
from localcluster.noderunner import procs
from localcluster.routerapi import routed_engines
from localcluster.stall import frozen, keep_decoding, running
from localcluster.supervisor import Cluster

from . import localnode
from .harness import Operator, condition, get_llmd

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (the test kills real engine processes)"),
]

CRASH_TIMEOUT = 240  # vLLM's imports, the failed load, one restart on 2 cores
STARTUP_TIMEOUT = 300  # a tiny vLLM CPU engine Ready, and the router beside it, on 2 cores
STALL_WINDOW = 12  # spec.engine.stallDetection.windowSeconds: short, for the test
# Out of rotation within a window and a third (the poll) after its last token, plus a reconcile
# and the router's watch; restarted a window later.
STALL_SLACK = 15


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=1) as node:
        yield node


def test_an_engine_that_cannot_load_its_model_is_degraded_with_its_last_words(
    cluster: Cluster,
    api: client.ApiClient,
    operator: Operator,
    node_runner: str,
    namespace: str,
) -> None:
    core = client.CoreV1Api(api)
    wait_free_gpus(core, node_runner, 1)
    body = tiny_llmd("missing", enabled=False)
    body["spec"]["model"]["name"] = "/models/not-there"
    body["spec"]["router"] = {"enabled": False}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
    try:
        degraded = wait_until(
            lambda: (
                (c := condition(get_llmd(api, namespace, "missing"), "Degraded")).get("reason")
                == "EngineCrashLoop"
                and c
            ),
            CRASH_TIMEOUT,
            2,
            "Degraded=True EngineCrashLoop",
        )
        assert degraded["status"] == "True"
        assert "keeps exiting" in degraded["message"], degraded
        assert "exit code" in degraded["message"], degraded
        print(f"status says: {degraded['message']}")
        # Not for want of memory: no advice to shrink the model.
        assert "ran out of memory" not in degraded["message"], degraded
    finally:
        delete_llmd(api, namespace, "missing")


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_an_engine_frozen_mid_decode_leaves_rotation_then_is_restarted(
    cluster: Cluster,
    api: client.ApiClient,
    operator: Operator,
    node_runner: str,
    namespace: str,
) -> None:
    core = client.CoreV1Api(api)
    wait_free_gpus(core, node_runner, 1)
    name = "wedged"
    body = tiny_llmd(name, enabled=False)
    body["spec"]["model"]["servedModelName"] = "tiny"
    body["spec"]["engine"]["stallDetection"] = {"windowSeconds": STALL_WINDOW}
    # One engine, and the router in front of it, whose rotation the engine must leave.
    body["spec"]["router"] = {"enabled": True}
    engines = f"llmfleet.dev/deployment={name},app.kubernetes.io/component=engine"
    routers = f"llmfleet.dev/deployment={name},app.kubernetes.io/component=router"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
    stop_load = threading.Event()
    stack = contextlib.ExitStack()
    try:
        (engine,) = wait_until(
            lambda: [
                p
                for p in core.list_namespaced_pod(namespace, label_selector=engines).items
                if _ready(p)
            ],
            STARTUP_TIMEOUT,
            2,
            "the engine Ready (its progress gate opened)",
        )
        (router,) = wait_until(
            lambda: [
                p
                for p in core.list_namespaced_pod(namespace, label_selector=routers).items
                if _ready(p)
            ],
            120,
            2,
            "the router Ready",
        )
        ip, rip = engine.status.pod_ip, router.status.pod_ip
        wait_until(lambda: ip in routed_engines(rip), 60, 1, "the router routing to the engine")

        keep_decoding(ip, stop_load)
        wait_until(lambda: running(ip) >= 1, 60, 0.2, "a request decoding")
        runner = procs.runner_id(node_runner, cluster.state_dir)
        stack.enter_context(frozen(runner, engine.metadata.uid))
        frozen_at = time.monotonic()
        stop_load.set()
        # The server's gauge holds what the frozen core last reported.
        assert running(ip) >= 1, "no request running when the engine core froze"
        # vLLM's server still answers /health: only the operator's judgement takes it out.
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=5) as health:
            assert health.status == 200

        wait_until(
            lambda: ip not in routed_engines(rip),
            STALL_WINDOW * 4 / 3 + STALL_SLACK,
            0.5,
            "the frozen engine out of the router's rotation",
        )
        out_after = time.monotonic() - frozen_at
        pod = core.read_namespaced_pod(engine.metadata.name, namespace)
        gate = {c.type: c.status for c in pod.status.conditions}
        assert gate.get("llmfleet.dev/engine-progressing") == "False", gate
        degraded = wait_until(
            lambda: (
                (c := condition(get_llmd(api, namespace, name), "Degraded")).get("reason")
                == "EngineStalled"
                and c
            ),
            30,
            1,
            "Degraded=True EngineStalled",
        )
        assert engine.metadata.name in degraded["message"], degraded
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
        assert any(
            e.reason == "EngineStalled" and engine.metadata.name in e.message for e in events.items
        ), [(e.reason, e.message) for e in events.items]

        def restarted() -> bool:
            pods = core.list_namespaced_pod(namespace, label_selector=engines).items
            old = [p for p in pods if p.metadata.uid == engine.metadata.uid]
            return not old or old[0].metadata.deletion_timestamp is not None

        wait_until(restarted, STALL_WINDOW + STALL_SLACK, 0.5, "the frozen engine deleted")
        print(
            f"frozen engine out of rotation {out_after:.1f}s after SIGSTOP, deleted "
            f"{time.monotonic() - frozen_at:.1f}s after (window {STALL_WINDOW}s)"
        )
        wait_until(
            lambda: any(
                p.metadata.uid != engine.metadata.uid and not p.metadata.deletion_timestamp
                for p in core.list_namespaced_pod(namespace, label_selector=engines).items
            ),
            30,
            1,
            "a new engine pod in its place",
        )
    finally:
        stop_load.set()
        stack.close()  # the engine core continued, so the node runner's stop is not held by it
        delete_llmd(api, namespace, name)
