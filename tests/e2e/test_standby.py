"""Standby engines end to end (spec.autoscaling.standby; docs/autoscaling.md, "Standby engines"):
a standby engine (the engine stand-in, which answers vLLM's /sleep, /wake_up and /is_sleeping)
is put to sleep once ready and is out of the router's rotation, wakes on a queue surge before
the HPA's new pod is Ready, and sleeps again once the surge is over.

Kept short: one LLMDeployment, one surge, the stand-in's slow warm-up standing for vLLM's start
so that the HPA's pod is still starting when the standby engine serves. The test reads the
engines' sleep state with the standby token from the Secret the operator made, as the operator
does: the dev-mode fence refuses it to anyone else.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import (
    EngineLoad,
    delete_llmd,
    pod_ready,
    tiny_llmd,
    wait_until,
)
from localcluster.routerapi import routed_engines
from localcluster.supervisor import Cluster

from e2e import harness, localnode
from e2e.harness import Operator, apply_with_gpus, stand_in

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner's engines and the lab's metrics stack"),
]

NAME = "standby"
NODE_GPUS = 3  # one serving engine, one standby, one for the HPA's new pod
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
STANDBY = f"{ENGINES},llmfleet.dev/standby=true"
ROUTERS = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=router"
TARGET_QUEUE_DEPTH = 2
MAX_NUM_SEQS = 2
# A new engine keeps its port closed this long, as vLLM does while it loads: the standby engine
# must serve well before the HPA's pod could.
WARM_UP_SECONDS = 60
COOLDOWN_SECONDS = 20


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=NODE_GPUS) as node:
        yield node


def standby_token(core: client.CoreV1Api, namespace: str) -> str:
    """The standby engines' token, "" until the operator has made its Secret."""
    try:
        secret = core.read_namespaced_secret(f"{NAME}-standby", namespace)
    except client.exceptions.ApiException as e:
        if e.status == 404:
            return ""
        raise
    return base64.b64decode(secret.data["token"]).decode()


def is_sleeping(ip: str, token: str) -> bool:
    """Whether the engine at `ip` says it sleeps; False while it does not listen yet (starting).
    A refusal (401) is raised: the token must open the fence."""
    request = urllib.request.Request(f"http://{ip}:8000/is_sleeping")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return bool(json.load(r)["is_sleeping"])
    except urllib.error.HTTPError:
        raise
    except OSError:
        return False


def refused_without_token(ip: str) -> bool:
    try:
        urllib.request.urlopen(f"http://{ip}:8000/is_sleeping", timeout=5)
    except urllib.error.HTTPError as e:
        return e.code == 401
    return False


def test_a_standby_engine_wakes_on_a_surge_before_the_hpas_pod_and_sleeps_after_it(
    cluster: Cluster,
    api: client.ApiClient,
    operator: Operator,
    metrics_stack: MetricsStack,
    node_runner: str,
    vllm_python: Path,
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(api)
    namespace = f"t-standby-{os.getpid()}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    try:
        body = tiny_llmd(
            NAME,
            max_num_seqs=MAX_NUM_SEQS,
            minReplicas=1,
            maxReplicas=2,
            targetQueueDepth=TARGET_QUEUE_DEPTH,
            standby={"replicas": 1, "cooldownSeconds": COOLDOWN_SECONDS},
        )
        stand_in(body, token_seconds=0.01, warm_up_seconds=WARM_UP_SECONDS)
        apply_with_gpus(cluster, core, namespace, node_runner, NODE_GPUS, body)

        def pods(selector: str) -> list[client.V1Pod]:
            return [
                p
                for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if not p.metadata.deletion_timestamp
            ]

        def standby_status() -> dict[str, int]:
            llmd = harness.get_llmd(api, namespace, NAME)
            return dict((llmd.get("status") or {}).get("standby") or {})

        # Started, put to sleep, out of rotation: Running but not Ready (its gate is False).
        token = wait_until(lambda: standby_token(core, namespace), 60, 2, "the standby Secret")
        (sleeper,) = wait_until(
            lambda: [
                p for p in pods(STANDBY) if p.status.pod_ip and is_sleeping(p.status.pod_ip, token)
            ],
            WARM_UP_SECONDS + 120,
            2,
            "the standby engine asleep",
        )
        assert not pod_ready(sleeper)
        assert refused_without_token(sleeper.status.pod_ip)
        wait_until(lambda: standby_status() == {"asleep": 1, "awake": 0}, 60, 2, "status asleep")
        (router,) = wait_until(lambda: [p for p in pods(ROUTERS) if pod_ready(p)], 120, 1, "router")
        assert sleeper.status.pod_ip not in routed_engines(router.status.pod_ip)

        # A surge: 5x the target per pod. The standby engine must serve first.
        with EngineLoad(api, namespace, ROUTERS, vllm_python, tmp_path / "load") as load:
            surge = load.start("surge", 6 * MAX_NUM_SEQS, duration=90, max_tokens=300)
            t_surge = time.monotonic()
            wait_until(
                lambda: sleeper.status.pod_ip in routed_engines(router.status.pod_ip),
                WARM_UP_SECONDS,
                1,
                "the standby engine woken and routed",
            )
            woke_after = time.monotonic() - t_surge
            serving_ready = [p for p in pods(ENGINES) if pod_ready(p)]
            assert not is_sleeping(sleeper.status.pod_ip, token)
            assert {p.metadata.name for p in serving_ready} >= {sleeper.metadata.name}
            # The HPA's pod, if it exists yet, is still in its warm-up.
            assert len(serving_ready) == 2, (woke_after, [p.metadata.name for p in serving_ready])
            events = core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={NAME}"
            ).items
            assert any(e.reason == "StandbyWoken" for e in events)
            surge.stop()

        # After the surge: asleep again once the queue stayed low for the cooldown.
        wait_until(
            lambda: is_sleeping(sleeper.status.pod_ip, token),
            COOLDOWN_SECONDS + 120,
            2,
            "the standby engine asleep again",
        )
        wait_until(lambda: standby_status() == {"asleep": 1, "awake": 0}, 60, 2, "status asleep")
    finally:
        delete_llmd(api, namespace, NAME)
        core.delete_namespace(namespace, propagation_policy="Background")
