"""What the e2e tests run the operator with: the chart's operator pod from the built image
(dev/localcluster/operator_pod.py) with the tests' own GPU configuration, and the helpers the
tests share."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client
from localcluster.claims import CLAIM_NAMESPACE_LABEL as TEST_NAMESPACE_LABEL
from localcluster.claims import bound_claim
from localcluster.metricsstack.load import PRODUCT, hold_gpus, wait_free_gpus
from localcluster.noderunner import adaptations
from localcluster.operator_pod import OperatorPod
from localcluster.operator_process import (
    CHART,
    OPERATOR_NAMESPACE,
    RELEASE,
    condition,
    get_llmd,
    helm_template,
    utcnow,
)
from localcluster.ports import free_port
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import E2E_GPU_PRODUCT

__all__ = [
    "CHART",
    "E2E_GPU_PRODUCT",
    "OPERATOR_NAMESPACE",
    "RELEASE",
    "STAND_IN",
    "TEST_NAMESPACE_LABEL",
    "Operator",
    "apply_with_gpus",
    "bound_claim",
    "condition",
    "e2e_operator",
    "free_port",
    "get_llmd",
    "helm_template",
    "stand_in",
    "utcnow",
    "wait_until",
]

# The node runner's emulated GPU as a profile with speed figures, added through the chart's
# gpuProfiles value as a user adds their own GPU: the plans of tiny-model LLMDeployments then
# carry a prediction, and the dashboards' measured-vs-predicted panels have both sides. The
# figures are a 2-core VM's order of magnitude (memory bandwidth, AVX-512 bf16); the planner's
# efficiencies are calibrated on GPUs, so no test here expects the prediction to be accurate.
LOCAL_GPU_PROFILES = {
    "local-cpu-emulated": {
        "memoryGiB": 16,
        "perNode": 4,
        "product": PRODUCT,
        "hbmGBps": 20,
        "bf16TFLOPS": 1,
        "interconnectGBps": 10,
    }
}


# What every e2e test gets as `operator`: the chart's Deployment, its pod run from the image.
Operator = OperatorPod
# Reconciles every 5 s rather than the chart's 60: tests wait for resyncs. Reads Secrets by name:
# test_lora.py's engine is behind an API key, which the operator sends to its LoRA API.
E2E_CHART_VALUES = ("resyncSeconds=5", "rbac.readSecrets=true")


# Engine pods with this annotation run the engine stand-in instead of vLLM (docs/cpu-adaptations.md,
# "The engine stand-in"): for tests about the operator or the router, not about vLLM.
STAND_IN = {adaptations.STAND_IN_ANNOTATION: adaptations.STAND_IN}


def stand_in(
    body: dict[str, Any],
    token_seconds: float | None = None,
    warm_up_seconds: float | None = None,
) -> dict[str, Any]:
    """`body`, an LLMDeployment manifest, with its engines served by the engine stand-in (started
    in about a second) rather than vLLM; returned for chaining, e.g. `stand_in(tiny_llmd(...))`.

    `token_seconds`: one engine step (a token for each running request), default 0.02 s;
    `warm_up_seconds`: how long the engine keeps its port closed after it starts, default 1 s,
    for a test that must see an engine starting as vLLM's 35-90 s would show it."""
    engine = body["spec"].setdefault("engine", {})
    settings = {
        key: str(value)
        for key, value in (
            (adaptations.STAND_IN_TOKEN_SECONDS, token_seconds),
            (adaptations.STAND_IN_WARM_UP_SECONDS, warm_up_seconds),
        )
        if value is not None
    }
    engine["podAnnotations"] = {**(engine.get("podAnnotations") or {}), **STAND_IN, **settings}
    return body


def apply_with_gpus(
    cluster: Cluster,
    core: client.CoreV1Api,
    namespace: str,
    node: str,
    gpus: int,
    body: dict[str, Any],
) -> None:
    """Apply `body` in `namespace` once `gpus` GPUs of the node runner `node` are free (pods of an
    earlier test may still be draining), holding any beyond them so that the test sees exactly
    `gpus` (a node runner someone else started may have more)."""
    free = wait_free_gpus(core, node, gpus)
    if free > gpus:
        hold_gpus(core, namespace, free - gpus)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))


def e2e_operator(cluster: Cluster, hub_url: str) -> Operator:
    """The operator as the e2e session runs it (not installed), reading config.json from the Hub
    stand-in at `hub_url`."""
    return OperatorPod(
        cluster,
        chart_values=(*E2E_CHART_VALUES, f"huggingFace.endpoint={hub_url}"),
        chart_json={f"gpuProfiles.{name}": profile for name, profile in LOCAL_GPU_PROFILES.items()},
    )
