"""`make demo`, end to end: the same `run()` (dev/localcluster/demo.py) on the test cluster. The
examples are applied and planned, and the tiny-local LLMDeployment answers a chat request at the
endpoint its status names (its vLLM Router), once it reports Available."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from localcluster import demo
from localcluster.metricsstack.load import delete_llmd, wait_until
from localcluster.supervisor import RUNNER_POD_NETWORK, Cluster

from . import localnode
from .harness import Operator

pytestmark = pytest.mark.cluster


def test_the_demo_answers_a_chat_request_at_the_llmdeployments_endpoint(
    cluster: Cluster, api: client.ApiClient, operator: Operator, vllm_python: Path
) -> None:
    shown: list[str] = []
    core = client.CoreV1Api(api)
    with localnode.local_node(cluster, gpus=4):
        try:
            answer = demo.run(cluster, out=shown.append)
        finally:
            print("\n".join(shown))
            delete_llmd(api, demo.DEMO_NAMESPACE, demo.LOCAL_NAME)
            core.delete_namespace(demo.DEMO_NAMESPACE)
            wait_until(
                lambda: (
                    demo.DEMO_NAMESPACE
                    not in {n.metadata.name for n in core.list_namespace().items}
                ),
                180,
                2,
                "the demo namespace gone",
            )
    assert answer.strip(), "the tiny model answered nothing"
    text = "\n".join(shown)
    # The offline plans of the GPU examples, and the request through the router's pod.
    for example in ("llama-3-1-70b", "llama-3-1-8b"):
        assert f"LLMDeployment {example}" in text
    prefix = RUNNER_POD_NETWORK.split(".0.0/")[0]
    assert f"/chat/completions, reached at http://{prefix}." in text
    assert "-router." in text
