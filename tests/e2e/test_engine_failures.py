"""An engine that cannot start shows in status: the real vLLM CPU engine on the node runner's
emulated GPU node, asked to load a model that is not there, exits at start and is restarted with
a back-off (CrashLoopBackOff); the LLMDeployment says Degraded=True EngineCrashLoop with the
engine's last words.

Real vLLM on purpose (no engine stand-in): the last words the operator reads and classifies
(not out of memory here) are vLLM's own, which a stand-in would only imitate (tests/README.md,
"Real vLLM or the stand-in")."""

from __future__ import annotations

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
from localcluster.supervisor import Cluster

from . import localnode
from .harness import Operator, condition, get_llmd

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (the test kills real engine processes)"),
]

CRASH_TIMEOUT = 240  # vLLM's imports, the failed load, one restart on 2 cores


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
