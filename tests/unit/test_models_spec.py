"""LLMDeploymentSpec validation: defaults, camelCase names, and errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llmfleet.models import DEFAULT_ENGINE_IMAGE, LLMDeploymentSpec, field_problems

MINIMAL: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}
GPUS = {"count": 8, "memoryGiB": 80}


def spec_with(**overrides: Any) -> dict[str, Any]:
    return {**MINIMAL, **overrides}


def problems(manifest_spec: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        LLMDeploymentSpec.model_validate(manifest_spec)
    return [str(problem) for problem in field_problems(caught.value)]


def assert_a_problem_starts_with(manifest_spec: dict[str, Any], expected: str) -> None:
    found = problems(manifest_spec)
    assert any(problem.startswith(expected) for problem in found), found


def test_minimal_spec_gets_documented_defaults() -> None:
    spec = LLMDeploymentSpec.model_validate(MINIMAL)

    assert spec.gpus is None
    assert (spec.strategy, spec.objective) == ("Auto", "Throughput")
    assert (spec.model.dtype, spec.model.quantization) == ("auto", "none")
    assert (spec.workload, spec.slo) == (None, None)
    # Unset: the operator's default engine image applies (--default-engine-image).
    assert spec.engine.image is None
    assert DEFAULT_ENGINE_IMAGE == "vllm/vllm-openai:v0.32.0"
    assert spec.engine.gpu_memory_utilization == 0.9
    assert spec.engine.max_model_len is None
    assert spec.engine.cpu_kv_cache_gib == 4
    assert spec.autoscaling.enabled
    # Unset: the planner derives it from the planned concurrency (Plan.target_queue_depth).
    assert spec.autoscaling.target_queue_depth is None
    assert spec.autoscaling.scale_down_stabilization_seconds == 300


def test_camel_case_fields_round_trip_with_their_fixed_names() -> None:
    manifest = {
        "model": {
            "name": "org/custom",
            "servedModelName": "custom",
            "architecture": {
                "parametersBillions": 7,
                "numLayers": 32,
                "numAttentionHeads": 32,
                "numKeyValueHeads": 8,
                "headDim": 128,
                "maxPositionEmbeddings": 4096,
            },
            "tokenSecretRef": {"name": "hf", "key": "token"},
            "cache": {"claimName": "hf-cache"},
        },
        "gpus": {"count": 2, "memoryGiB": 24, "perNode": 4, "product": "NVIDIA-L4"},
        "engine": {
            "maxModelLen": 4096,
            "maxNumSeqs": 8,
            "maxNumBatchedTokens": 512,
            "cpuKVCacheGiB": 2,
            "apiKeySecretRef": {"name": "api", "key": "key"},
            "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            "extraArgs": ["--enforce-eager"],
        },
        "autoscaling": {"minReplicas": 1, "maxReplicas": 3},
    }
    spec = LLMDeploymentSpec.model_validate(manifest)

    dumped = spec.model_dump(by_alias=True, exclude_unset=True)
    assert dumped["gpus"]["memoryGiB"] == 24
    assert dumped["engine"]["cpuKVCacheGiB"] == 2
    assert dumped["model"]["cache"] == {"claimName": "hf-cache"}
    assert LLMDeploymentSpec.model_validate(dumped) == spec


def test_spec_is_immutable() -> None:
    spec = LLMDeploymentSpec.model_validate(MINIMAL)
    with pytest.raises(ValidationError):
        spec.strategy = "SinglePod"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("manifest_spec", "expected"),
    [
        pytest.param({}, "spec.model: Field required", id="model-is-required"),
        pytest.param(
            spec_with(gpus={"count": 0, "memoryGiB": 80}),
            "spec.gpus.count: Input should be greater than or equal to 1",
            id="gpu-count-at-least-one",
        ),
        pytest.param(
            spec_with(gpus={"count": 4, "memoryGiB": 80, "perNode": 32}),
            "spec.gpus.perNode: Input should be less than or equal to 16",
            id="per-node-at-most-16",
        ),
        pytest.param(
            spec_with(engine={"gpuMemoryUtilization": 1.5}),
            "spec.engine.gpuMemoryUtilization: Input should be less than or equal to 1",
            id="utilization-at-most-one",
        ),
        pytest.param(
            spec_with(engine={"gpuMemoryUtilization": 0}),
            "spec.engine.gpuMemoryUtilization: Input should be greater than 0",
            id="utilization-above-zero",
        ),
        pytest.param(
            spec_with(engine={"maxModelLen": 8}),
            "spec.engine.maxModelLen: Input should be greater than or equal to 16",
            id="max-model-len-at-least-16",
        ),
        pytest.param(
            spec_with(autoscaling={"targetQueueDepth": 0}),
            "spec.autoscaling.targetQueueDepth: Input should be greater than or equal to 1",
            id="queue-depth-at-least-one",
        ),
        pytest.param(
            spec_with(strategy="Spread"),
            "spec.strategy: Input should be 'Auto', 'SinglePod', 'MultiPod' or 'MultiNode'",
            id="strategy-lists-allowed-values",
        ),
        pytest.param(
            {"model": {"name": "x", "quantization": "int4"}},
            "spec.model.quantization: Input should be 'none', 'fp8', 'int8', 'awq' or 'gptq'",
            id="quantization-lists-allowed-values",
        ),
        pytest.param(
            spec_with(gpus={"cnt": 8, "memoryGiB": 80, "count": 8}),
            "spec.gpus.cnt: Extra inputs are not permitted",
            id="typo-is-refused-not-ignored",
        ),
        pytest.param(
            spec_with(engine={"extraArgs": ["--enforce-eager", 3]}),
            "spec.engine.extraArgs[1]: Input should be a valid string",
            id="list-items-are-indexed",
        ),
        pytest.param(
            spec_with(engine={"resources": {"requests": {"memory": "lots"}}}),
            "spec.engine.resources.requests.memory: String should match pattern",
            id="resources-must-be-quantities",
        ),
    ],
)
def test_invalid_field_is_named_by_its_manifest_path(
    manifest_spec: dict[str, Any], expected: str
) -> None:
    assert_a_problem_starts_with(manifest_spec, expected)


@pytest.mark.parametrize(
    ("manifest_spec", "expected"),
    [
        pytest.param(
            spec_with(gpus={"count": 12, "memoryGiB": 80, "perNode": 8}),
            "spec.gpus.count: count must be at most perNode or a multiple of perNode",
            id="gpus-beyond-a-node-fill-whole-nodes",
        ),
        pytest.param(
            spec_with(autoscaling={"minReplicas": 4, "maxReplicas": 2}),
            "spec.autoscaling.maxReplicas: maxReplicas must be greater than or equal to "
            "minReplicas",
            id="max-replicas-below-min",
        ),
        pytest.param(
            {
                "model": {
                    "name": "org/custom",
                    "architecture": {
                        "parametersBillions": 7,
                        "numLayers": 32,
                        "numAttentionHeads": 32,
                        "numKeyValueHeads": 6,
                        "headDim": 128,
                        "maxPositionEmbeddings": 4096,
                    },
                }
            },
            "spec.model.architecture.numKeyValueHeads: numKeyValueHeads must divide "
            "numAttentionHeads",
            id="kv-heads-divide-heads",
        ),
        pytest.param(
            {
                "model": {
                    "name": "org/custom",
                    "architecture": {
                        "parametersBillions": 7,
                        "numLayers": 32,
                        "numAttentionHeads": 32,
                        "numKeyValueHeads": 8,
                        "headDim": 128,
                        "maxPositionEmbeddings": 4096,
                    },
                },
                "engine": {"maxModelLen": 8192},
            },
            "spec.engine.maxModelLen: engine.maxModelLen must be at most "
            "model.architecture.maxPositionEmbeddings",
            id="max-model-len-within-context",
        ),
        pytest.param(
            spec_with(engine={"maxNumSeqs": 512, "maxNumBatchedTokens": 256}),
            "spec.engine.maxNumBatchedTokens: maxNumBatchedTokens must be at least maxNumSeqs",
            id="batched-tokens-cover-sequences",
        ),
        pytest.param(
            spec_with(gpus={"count": 16, "memoryGiB": 80, "perNode": 8}, strategy="SinglePod"),
            "spec.strategy: strategy SinglePod needs gpus.count at most gpus.perNode",
            id="single-pod-stays-on-one-node",
        ),
        pytest.param(
            spec_with(strategy="MultiPod"),
            "spec.strategy: strategy MultiPod needs gpus",
            id="multi-pod-needs-gpus",
        ),
        pytest.param(
            spec_with(engine={"extraArgs": ["--port=9000"]}),
            "spec.engine.extraArgs: extraArgs must not set --host, --port",
            id="port-is-owned-by-the-operator",
        ),
        pytest.param(
            spec_with(engine={"extraArgs": ["--tensor_parallel_size", "2"]}),
            "spec.engine.extraArgs: extraArgs must not set",
            id="tensor-parallelism-comes-from-the-plan",
        ),
        pytest.param(
            spec_with(engine={"resources": {"limits": {"nvidia.com/gpu": "1"}}}),
            "spec.engine.resources.limits: only cpu, memory and ephemeral-storage",
            id="gpu-resources-come-from-the-plan",
        ),
    ],
)
def test_cross_field_rule_names_the_blamed_field(
    manifest_spec: dict[str, Any], expected: str
) -> None:
    assert_a_problem_starts_with(manifest_spec, expected)


@pytest.mark.parametrize(
    "manifest_spec",
    [
        pytest.param(spec_with(gpus={"count": 16, "memoryGiB": 80}), id="two-whole-nodes"),
        pytest.param(spec_with(gpus={"count": 3, "memoryGiB": 80}), id="part-of-one-node"),
        pytest.param(spec_with(autoscaling={"maxReplicas": 1}), id="only-max-replicas-set"),
        pytest.param(spec_with(engine={"extraArgs": ["--portal", "x"]}), id="port-lookalike"),
        pytest.param(
            spec_with(gpus={"count": 8, "memoryGiB": 80}, strategy="SinglePod"),
            id="single-pod-on-a-full-node",
        ),
    ],
)
def test_valid_combinations_are_accepted(manifest_spec: dict[str, Any]) -> None:
    LLMDeploymentSpec.model_validate(manifest_spec)
