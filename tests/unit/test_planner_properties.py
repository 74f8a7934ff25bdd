"""Invariants of every plan, over generated architectures, GPUs and settings."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan, PlanError, plan

GIB = 1024**3
HEADS = [8, 12, 16, 24, 28, 32, 40, 48, 64, 72, 96, 128]


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    heads = draw(st.sampled_from(HEADS))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    context = draw(st.sampled_from([2048, 4096, 32768, 131072]))
    per_node = draw(st.integers(1, 16))
    count = draw(st.one_of(st.integers(1, per_node), st.integers(2, 4).map(lambda k: k * per_node)))
    engine: dict[str, Any] = {
        "gpuMemoryUtilization": draw(st.floats(0.5, 1.0)),
        "maxModelLen": draw(st.none() | st.integers(16, context)),
    }
    return {
        "model": {
            "name": "generated/model",
            "dtype": draw(st.sampled_from(["auto", "bfloat16", "float16", "float32"])),
            "quantization": draw(st.sampled_from(["none", "fp8", "int8", "awq", "gptq"])),
            "architecture": {
                "parametersBillions": draw(st.floats(0.1, 200)),
                "numLayers": draw(st.integers(1, 128)),
                "numAttentionHeads": heads,
                "numKeyValueHeads": kv_heads,
                "headDim": draw(st.sampled_from([64, 128, 256])),
                "maxPositionEmbeddings": context,
            },
        },
        "gpus": {
            "count": count,
            "memoryGiB": draw(st.floats(8, 192)),
            "perNode": per_node,
        },
        "strategy": draw(st.sampled_from(["Auto", "SinglePod", "MultiPod"])),
        "objective": draw(st.sampled_from(["Throughput", "Latency"])),
        "engine": engine,
    }


def planned(manifest: dict[str, Any]) -> tuple[LLMDeploymentSpec, Plan] | None:
    try:
        spec = LLMDeploymentSpec.model_validate(manifest)
        return spec, plan(spec)
    except (ValidationError, PlanError):
        return None


# too_slow: on a loaded 2-core machine generating 400 examples is slow, not wrong.
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_plan_stays_within_gpu_memory(manifest: dict[str, Any]) -> None:
    outcome = planned(manifest)
    if outcome is None:
        return
    spec, result = outcome
    assert spec.gpus is not None
    budget = spec.gpus.memory_gib * spec.engine.gpu_memory_utilization
    used = result.weights_gib_per_gpu + result.reserve_gib_per_gpu + result.kv_cache_gib_per_gpu
    assert used <= budget + 1e-9

    arch = manifest["model"]["architecture"]
    kv_heads = max(1, arch["numKeyValueHeads"] // result.tensor_parallel_size)
    element = 4 if spec.model.dtype == "float32" else 2
    # A GPU keeps the KV cache of its pipeline stage's layers (all of them without one).
    layers = math.ceil(arch["numLayers"] / result.pipeline_parallel_size)
    per_token = 2 * layers * kv_heads * arch["headDim"] * element
    assert result.kv_cache_tokens_per_replica * per_token <= result.kv_cache_gib_per_gpu * GIB
    assert result.kv_cache_tokens_per_replica >= result.max_model_len


# too_slow: on a loaded 2-core machine generating 400 examples is slow, not wrong.
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_plan_uses_exactly_the_given_gpus(manifest: dict[str, Any]) -> None:
    outcome = planned(manifest)
    if outcome is None:
        return
    spec, result = outcome
    assert spec.gpus is not None
    tp, pp = result.tensor_parallel_size, result.pipeline_parallel_size
    assert result.gpus_per_replica == tp * pp
    assert tp <= spec.gpus.per_node
    # Pipeline stages only across nodes, each stage a whole node.
    assert (pp > 1) == (result.strategy == "MultiNode")
    assert pp == 1 or tp == spec.gpus.per_node
    assert result.replicas * result.gpus_per_replica == result.total_gpus == spec.gpus.count
    if result.strategy != "MultiNode":
        assert (result.strategy == "SinglePod") == (result.replicas == 1)
    assert result.min_replicas <= result.max_replicas


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests())
def test_vllm_args_match_the_plan(manifest: dict[str, Any]) -> None:
    outcome = planned(manifest)
    if outcome is None:
        return
    _, result = outcome
    args = list(result.vllm_args)
    assert args[args.index("--tensor-parallel-size") + 1] == str(result.tensor_parallel_size)
    if result.pipeline_parallel_size > 1:
        assert args[args.index("--pipeline-parallel-size") + 1] == str(
            result.pipeline_parallel_size
        )
    else:
        assert "--pipeline-parallel-size" not in args
    assert args[args.index("--max-model-len") + 1] == str(result.max_model_len)
    assert args[args.index("--max-num-seqs") + 1] == str(result.max_concurrent_sequences)
    assert 1 <= result.max_concurrent_sequences <= result.max_num_batched_tokens


def test_generated_specs_mostly_plan() -> None:
    # Guards the properties above against vacuity: most generated specs must produce a plan.
    results: list[bool] = []

    @settings(
        max_examples=200,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(manifests())
    def collect(manifest: dict[str, Any]) -> None:
        results.append(planned(manifest) is not None)

    collect()
    assert sum(results) >= len(results) / 4
