"""`make demo`, end to end: the same `run()` (dev/localcluster/demo) on the test cluster. What a
user who runs it notices: the tiny model answers a chat request at the endpoint its status names
(its vLLM Router), every GPU example is Available (or its status says why not), none is
Degraded, and the last screen shows each LLMDeployment with its conditions.

The tiny model runs on real vLLM (no engine stand-in): this is the suite's chat completion
through the router to a real engine, and its HPA reading a real engine's queue through
Prometheus and prometheus-adapter (tests/README.md, "Real vLLM or the stand-in")."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from localcluster import demo
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import GROUP, PLURAL, VERSION, delete_llmd
from localcluster.operator_process import condition
from localcluster.supervisor import RUNNER_POD_NETWORK, Cluster

from llmfleet.render.autoscaling import QUEUE_METRIC

from . import localnode
from .harness import Operator

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner and the lab's metrics stack (make demo's steps)"),
]


def test_the_demo_answers_at_the_endpoint_and_every_example_is_available_none_degraded(
    cluster: Cluster,
    api: client.ApiClient,
    operator: Operator,
    metrics_stack: MetricsStack,
    vllm_python: Path,
) -> None:
    shown: list[str] = []
    with localnode.local_node(cluster, gpus=4):
        try:
            answer = demo.run(cluster, out=shown.append)
            items = client.CustomObjectsApi(api).list_namespaced_custom_object(
                GROUP, VERSION, demo.DEMO_NAMESPACE, PLURAL
            )["items"]
            local_hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(
                demo.LOCAL_NAME, demo.DEMO_NAMESPACE
            )
        finally:
            print("\n".join(shown))
            with contextlib.suppress(client.ApiException):  # (not applied: the demo failed)
                delete_llmd(api, demo.DEMO_NAMESPACE, demo.LOCAL_NAME)
            demo.tear_down(cluster)
    assert answer.strip(), "the tiny model answered nothing"
    llmds: dict[str, dict[str, Any]] = {d["metadata"]["name"]: d for d in items}
    text = "\n".join(shown)

    # The last screen: each LLMDeployment with its conditions and why it runs or waits.
    last = text[text.index("Where each LLMDeployment stands") :]
    blocks = {name: block(last, name) for name in llmds}
    degraded = {
        name: condition(d, "Degraded")
        for name, d in llmds.items()
        if condition(d, "Degraded").get("status") == "True"
    }
    assert not degraded, degraded
    gpu_examples = {"llama-3-1-70b", "qwen2-5-72b-fp8", "llama-3-1-8b"}
    assert gpu_examples | {demo.LOCAL_NAME} == set(llmds)
    for name in gpu_examples:
        if condition(llmds[name], "Available").get("status") != "True":
            # Waiting is allowed only with its reason on the last screen.
            assert "-> waits: " in blocks[name] or "-> not created: " in blocks[name]
        assert "Degraded=False AsPlanned" in blocks[name]
        assert "fake engines (kwok)" in blocks[name]
    # The demo makes the claim and Secrets the 70B example names: nothing keeps it waiting.
    assert condition(llmds["llama-3-1-70b"], "Available")["status"] == "True"
    assert "Available=True EnginesReady" in blocks[demo.LOCAL_NAME]
    # Its HPA scales on the real engine's queue: read through Prometheus and prometheus-adapter.
    active = [c for c in local_hpa.status.conditions or [] if c.type == "ScalingActive"]
    assert [c.status for c in active] == ["True"], active
    read = [m.pods.metric.name for m in local_hpa.status.current_metrics or [] if m.pods]
    assert read == [QUEUE_METRIC], local_hpa.status.current_metrics
    # The offline plans, and the request through the router's pod.
    assert "LLMDeployment llama-3-1-70b" in text
    prefix = RUNNER_POD_NETWORK.split(".0.0/")[0]
    assert f"/chat/completions, reached at http://{prefix}." in text
    assert "-router." in text


def block(screen: str, name: str) -> str:
    """The lines the last screen shows for one LLMDeployment."""
    start = screen.index(f"\n{name}: ")
    end = screen.find("\n\n", start + 1)
    return screen[start : end if end >= 0 else None]
