"""Models larger than one node: tensor parallel within a node, pipeline parallel across nodes
(strategy MultiNode, llmfleet.planner)."""

from __future__ import annotations

from typing import Any

import pytest
from localcluster.metricsstack.load import TINY_ARCHITECTURE

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan

H100 = {"memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
L405 = {"name": "meta-llama/Llama-3.1-405B-Instruct"}
L70 = {"name": "meta-llama/Llama-3.1-70B-Instruct"}


def spec(**fields: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(fields)


PLANNED = {
    "405b-bf16-on-two-nodes": (
        spec(model=L405, gpus={**H100, "count": 16}),
        {"tp": 8, "pp": 2, "replicas": 1},
    ),
    "405b-bf16-on-four-nodes-makes-two-replicas": (
        spec(model=L405, gpus={**H100, "count": 32}),
        {"tp": 8, "pp": 2, "replicas": 2},
    ),
    "70b-asked-for-multinode": (
        spec(model=L70, gpus={**H100, "count": 16}, strategy="MultiNode"),
        {"tp": 8, "pp": 2, "replicas": 1},
    ),
}


@pytest.mark.parametrize(("given", "want"), PLANNED.values(), ids=PLANNED.keys())
def test_a_model_larger_than_a_node_spans_nodes_tp_within_pp_across(
    given: LLMDeploymentSpec, want: dict[str, int]
) -> None:
    p = plan(given)
    assert p.strategy == "MultiNode"
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.replicas) == (
        want["tp"],
        want["pp"],
        want["replicas"],
    )
    assert p.gpus_per_replica == want["tp"] * want["pp"]
    assert given.gpus is not None
    assert p.total_gpus == given.gpus.count
    args = list(p.vllm_args)
    assert args[args.index("--tensor-parallel-size") + 1] == str(want["tp"])
    assert args[args.index("--pipeline-parallel-size") + 1] == str(want["pp"])
    assert p.kv_cache_tokens_per_replica >= p.max_model_len  # holds a full-length sequence
    assert f"PP={want['pp']}" in p.reason
    assert p.summary().pipeline_parallel_size == want["pp"]


def test_pipeline_stages_split_the_weights_and_the_kv_cache_per_gpu() -> None:
    one = plan(spec(model=L70, gpus={**H100, "count": 8}, strategy="SinglePod"))
    two = plan(spec(model=L70, gpus={**H100, "count": 16}, strategy="MultiNode"))
    # Each GPU holds half the layers: half the weights, and KV for half the layers per token.
    assert two.weights_gib_per_gpu == pytest.approx(one.weights_gib_per_gpu / 2, abs=0.02)
    assert two.kv_cache_tokens_per_replica > 2 * one.kv_cache_tokens_per_replica


REFUSED = {
    "multinode-on-one-node": (
        lambda: spec(model=L70, gpus={**H100, "count": 8}, strategy="MultiNode"),
        "spec.strategy",
    ),
    "autoscaling-beyond-the-gpus": (
        lambda: spec(
            model=L405,
            gpus={**H100, "count": 16},
            autoscaling={"minReplicas": 1, "maxReplicas": 2},
        ),
        "spec.autoscaling.maxReplicas",
    ),
    "deeper-than-the-model-has-layers": (
        lambda: spec(
            model={"name": "/models/tiny", "architecture": dict(TINY_ARCHITECTURE)},
            gpus={"count": 6, "memoryGiB": 16, "perNode": 2},
            strategy="MultiNode",
        ),
        "spec.gpus.count",
    ),
    "too-big-even-across-the-nodes": (
        lambda: spec(model=L405, gpus={"count": 16, "memoryGiB": 24, "perNode": 8}),
        "spec.gpus.count",
    ),
    "node-size-not-a-tensor-parallel-size": (
        lambda: spec(model=L405, gpus={**H100, "perNode": 6, "count": 12}),
        "spec.gpus.perNode",
    ),
}


@pytest.mark.parametrize(("given", "field"), REFUSED.values(), ids=REFUSED.keys())
def test_multinode_refusals_name_the_field(given: Any, field: str) -> None:
    with pytest.raises(PlanError) as refused:
        plan(given())
    assert refused.value.field == field, refused.value


def test_single_pod_on_a_model_that_needs_two_nodes_is_refused_with_the_numbers() -> None:
    with pytest.raises(PlanError) as refused:
        plan(spec(model=L405, gpus={**H100, "count": 8}, strategy="SinglePod"))
    assert "does not fit" in str(refused.value)
    assert "GiB" in str(refused.value)
