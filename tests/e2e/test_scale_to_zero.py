"""Scale to zero end to end: KEDA (built from its Go modules, run by the local cluster) scales an
LLMDeployment with `autoscaling.minReplicas: 0` to no engine pod when idle, and a request sent
then is held by the router (its router hop, until an engine is Ready to take it) until KEDA has
started an engine (a real vLLM on the node runner), then answered. Without KEDA, or without the
Prometheus it reads, the LLMDeployment is refused with a message that says what to install or
set. See docs/autoscaling.md#scale-to-zero.

Real vLLM throughout, on purpose: this is the suite's scale-to-zero wake-up on a real engine
(tests/README.md, "Real vLLM or the stand-in"), the router holding a request through a real
start. Running the engine that idles to zero on the engine stand-in and waking a real one saved
nothing measurable (148 s against 150 s, 2026-11-25): the time goes to the idle window and the
wake-up's real start.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import delete_llmd, free_gpus, hold_gpus, wait_free_gpus
from localcluster.metricsstack.zero import (
    at_zero,
    engine_pods,
    router_ip,
    stream_completion,
    zero_llmd,
)
from localcluster.operator_process import condition, get_llmd
from localcluster.supervisor import Cluster

from e2e import localnode
from e2e.harness import Operator, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner and the lab's KEDA and metrics stack"),
]

NODE_GPUS = 1
IDLE_SECONDS = 30  # the smallest idleSeconds the API takes
WAKE_TIMEOUT_SECONDS = 240  # a tiny-model engine on 2 busy cores starts in 40-90 s
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Any:
    with localnode.local_node(cluster, gpus=NODE_GPUS) as node:
        yield node


def apply(cluster: Cluster, namespace: str, body: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))


def warnings(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    return [
        f"{e.reason}: {e.message}"
        for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.type == "Warning"
    ]


def test_refused_without_keda_or_its_prometheus_then_idles_to_zero_and_a_request_wakes_it(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    metrics_stack: MetricsStack,
    node_runner: str,
) -> None:
    mark = operator.mark()
    core = client.CoreV1Api(api)
    free = wait_free_gpus(core, node_runner, NODE_GPUS)
    if free > NODE_GPUS:  # a node left with more GPUs by another test module
        hold_gpus(core, namespace, free - NODE_GPUS)
    body = zero_llmd("zero", IDLE_SECONDS, WAKE_TIMEOUT_SECONDS)
    name = body["metadata"]["name"]

    def cond(ctype: str) -> dict[str, Any]:
        return condition(get_llmd(api, namespace, name), ctype)

    # --- Refused, saying what is missing. The session's operator runs as the chart installs it
    # by default: without keda.prometheusUrl.
    apply(cluster, namespace, body)
    refused = wait_until(
        lambda: (c := cond("Planned")).get("reason") == "KEDAPrometheusUnset" and c,
        timeout=60,
        what="Planned=False KEDAPrometheusUnset",
    )
    assert refused["status"] == "False"
    for words in ("spec.autoscaling.minReplicas", "keda.prometheusUrl", "at least 1"):
        assert words in refused["message"], refused["message"]
    with cluster.without(cluster.addons.keda):
        # As on a cluster where nobody installed KEDA: neither of its APIs, no process of it.
        groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
        assert not {"keda.sh", "external.metrics.k8s.io"} & groups
        assert not any(cluster.addons.keda.state().values())
        refused = wait_until(
            lambda: (c := cond("Planned")).get("reason") == "KEDAMissing" and c,
            timeout=60,
            what="Planned=False KEDAMissing",
        )
        for words in ("install KEDA", "keda.sh/v1alpha1", "at least 1"):
            assert words in refused["message"], refused["message"]
        assert any(w.startswith("KEDAMissing: ") for w in warnings(api, namespace, name))
        # Refused means nothing was made: no engine to scale, no router to hold requests.
        assert not client.AppsV1Api(api).list_namespaced_deployment(namespace).items
        assert operator.exits_since(mark) == [], "the operator restarted"  # reported, not crashed
    assert all(cluster.addons.keda.state().values()), cluster.addons.keda.state()

    # --- KEDA back and the chart given its Prometheus: the same LLMDeployment is created.
    with operator.configured(f"keda.prometheusUrl={metrics_stack.prometheus_url}"):
        t0 = time.monotonic()
        wait_until(lambda: cond("Planned").get("status") == "True", 60, 1, "Planned=True")
        # Nobody asks: after the first idle window KEDA takes the engine away.
        wait_until(
            lambda: at_zero(api, namespace, name) and cond("ScaledToZero").get("status") == "True",
            timeout=IDLE_SECONDS + 180,
            interval=2,
            what="no engine pod and ScaledToZero=True",
        )
        print(f"at zero {time.monotonic() - t0:.0f}s after the operator took it")
        obj = get_llmd(api, namespace, name)
        assert condition(obj, "ScaledToZero")["reason"] == "Idle"
        available = condition(obj, "Available")
        assert (available["status"], available["reason"]) == ("True", "ScaledToZero")
        assert (obj["status"]["replicas"], obj["status"]["gpus"]) == (0, 0)
        assert free_gpus(core, node_runner) == NODE_GPUS  # the GPU is given back
        # KEDA owns the HPA between 1 and maxReplicas; the operator renders none of its own.
        hpas = client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace)
        assert [h.metadata.name for h in hpas.items] == [f"keda-hpa-{name}"]

        rip = wait_until(
            lambda: router_ip(core, namespace, name), timeout=60, what="the router Ready"
        )
        # A client sends one request at zero, with no retries of its own: the router holds it.
        answer = stream_completion(
            f"http://{rip}:8000/v1", timeout=WAKE_TIMEOUT_SECONDS + 30, max_tokens=MAX_TOKENS
        )
        print(f"first token after {answer.first_token_s:.1f}s at zero ({answer.total_s:.1f}s)")
        assert answer.status == 200
        assert answer.tokens == MAX_TOKENS
        # It waited for an engine to start, not a canned error.
        assert answer.first_token_s < WAKE_TIMEOUT_SECONDS
        assert [p for p in engine_pods(core, namespace, name) if p.status.phase == "Running"]
        serving = wait_until(
            lambda: (c := cond("ScaledToZero")).get("reason") == "Serving" and c,
            timeout=60,
            what="ScaledToZero=False Serving",
        )
        assert serving["status"] == "False"
    delete_llmd(api, namespace, name)
