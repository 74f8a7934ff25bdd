"""The planner's layout choices and refusals, as a user reads them from `llmfleet plan`."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan, PlanError, plan

H100 = {"memoryGiB": 80, "perNode": 8}
L70 = "meta-llama/Llama-3.1-70B-Instruct"
L8 = "meta-llama/Llama-3.1-8B-Instruct"


def deployment(
    name: str, gpus: int | None = 8, *, model: dict[str, Any] | None = None, **spec: Any
) -> LLMDeploymentSpec:
    manifest: dict[str, Any] = {"model": {"name": name, **(model or {})}, **spec}
    if gpus is not None:
        manifest["gpus"] = {"count": gpus, **H100}
    return LLMDeploymentSpec.model_validate(manifest)


def refusal(spec: LLMDeploymentSpec) -> PlanError:
    with pytest.raises(PlanError) as caught:
        plan(spec)
    return caught.value


@pytest.mark.parametrize(
    ("spec", "strategy", "replicas", "tensor_parallel"),
    [
        pytest.param(deployment(L70), "MultiPod", 2, 4, id="70b-bf16-throughput-two-tp4-pods"),
        pytest.param(deployment(L8), "MultiPod", 8, 1, id="8b-throughput-one-gpu-per-pod"),
        pytest.param(
            deployment(L8, objective="Latency"), "SinglePod", 1, 8, id="8b-latency-widest-tp"
        ),
        pytest.param(
            deployment(L70, model={"quantization": "fp8"}),
            "MultiPod",
            4,
            2,
            id="70b-fp8-halves-the-pod-size",
        ),
        pytest.param(deployment(L70, gpus=4), "SinglePod", 1, 4, id="70b-needs-all-four-gpus"),
        pytest.param(
            deployment(L70, gpus=16, objective="Latency"),
            "MultiPod",
            2,
            8,
            id="latency-beyond-a-node-one-pod-per-node",
        ),
        pytest.param(
            deployment("Qwen/Qwen2.5-7B-Instruct", objective="Latency"),
            "MultiPod",
            2,
            4,
            id="28-heads-cap-tensor-parallelism-at-4",
        ),
        pytest.param(
            deployment("google/gemma-3-4b-it", objective="Latency"),
            "SinglePod",
            1,
            8,
            id="gemma-8-heads-allow-tp8",
        ),
        pytest.param(
            deployment("facebook/opt-66b", gpus=8),
            "MultiPod",
            2,
            4,
            id="opt-multi-head-kv-cache-needs-tp4",
        ),
        pytest.param(
            deployment(L8, strategy="SinglePod"), "SinglePod", 1, 8, id="forced-single-pod"
        ),
        pytest.param(deployment(L70, strategy="MultiPod"), "MultiPod", 2, 4, id="forced-multi-pod"),
        pytest.param(
            deployment(L70, gpus=2),
            "SinglePod",
            1,
            2,
            id="fewer-than-four-sequences-still-planned",
        ),
        pytest.param(deployment("facebook/opt-125m", gpus=None), "SinglePod", 1, 1, id="cpu-only"),
    ],
)
def test_layout(
    spec: LLMDeploymentSpec, strategy: str, replicas: int, tensor_parallel: int
) -> None:
    result = plan(spec)

    assert (result.strategy, result.replicas, result.tensor_parallel_size) == (
        strategy,
        replicas,
        tensor_parallel,
    )
    assert result.total_gpus == (spec.gpus.count if spec.gpus else 0)


def test_70b_on_8_h100_explains_why_not_smaller_or_wider() -> None:
    result = plan(deployment(L70))

    assert result.weights_gib_per_gpu == pytest.approx(32.88, abs=0.01)
    assert result.kv_cache_tokens_per_replica > 400_000
    # At TP=4: 0.3 + 16384 batched tokens x (6 x 28672 / 4 MLP + 7 x 8192 hidden) bytes = 1.84
    # GiB of reserve (vLLM measured 3.56 + 0.22 for 70B fp8 at TP=1, where this rule gives 3.80).
    assert result.reserve_gib_per_gpu == 1.84
    # At TP=2: 71.26 GiB usable ((80 - 0.82) x 0.9, as vLLM counts on an H100) - 65.76 GiB of
    # weights - 2.49 GiB reserve = 3.01 GiB.
    assert "At TP=2, 3.01 GiB of KV cache" in result.reason
    assert "fewer than the 4 wanted" in result.reason
    assert "2 pods of TP=4" in result.reason
    # memoryGiB alone gives no performance constants: chosen by the memory rules, and said so.
    assert result.predicted is None
    assert "Speed is not predicted" in result.reason


def test_reason_says_when_few_sequences_fit() -> None:
    # 19,712 KV tokens at TP=2: one 16,384-token sequence.
    result = plan(deployment(L70, gpus=2, engine={"maxModelLen": 16384}))

    assert "Only 1 full-length sequence fit" in result.reason


def test_cpu_only_plan_sizes_kv_from_cpu_cache_and_uses_no_gpu() -> None:
    result = plan(deployment("facebook/opt-125m", gpus=None, engine={"cpuKVCacheGiB": 2}))

    # opt-125m: 2 x 12 layers x 12 heads x 64 x 2 bytes = 36 KiB per token.
    assert result.kv_cache_tokens_per_replica == 2 * 1024**3 // (36 * 1024) // 16 * 16
    assert (result.gpus_per_replica, result.total_gpus) == (0, 0)
    assert result.cpu_memory_gib == 5
    assert "--gpu-memory-utilization" not in result.vllm_args


@pytest.mark.parametrize(
    ("spec", "field", "fragments"),
    [
        pytest.param(
            deployment("meta-llama/Llama-3.1-405B-Instruct"),
            "spec.gpus",
            [
                "does not fit on one node of 8 GPUs",
                "94.51 GiB of weights",
                "71.26 GiB",
                "spec.model.quantization fp8",
            ],
            id="405b-bf16-fits-nowhere-suggests-fp8",
        ),
        pytest.param(
            deployment(L70, gpus=1),
            "spec.gpus.count",
            ["does not fit on 1 GPU", "spec.gpus.count 2"],
            id="70b-on-one-gpu-suggests-two",
        ),
        pytest.param(
            deployment(L70, gpus=6),
            "spec.gpus.count",
            ["6 GPUs do not split into pods of 4", "4, 8, 16, 24"],
            id="uneven-count-lists-counts-that-work",
        ),
        pytest.param(
            deployment(L8, gpus=6, strategy="SinglePod"),
            "spec.gpus.count",
            ["one of 1, 2, 4, 8"],
            id="single-pod-needs-a-valid-tp-size",
        ),
        pytest.param(
            deployment(L70, gpus=4, strategy="MultiPod"),
            "spec.strategy",
            ["needs at least two pods", "8, 16"],
            id="multi-pod-that-would-be-one-pod",
        ),
        pytest.param(
            deployment(L70, gpus=2, strategy="SinglePod", engine={"maxModelLen": 32768}),
            "spec.gpus.count",
            # 3.01 GiB of KV cache per GPU at TP=2 (2.49 GiB reserve at 16384 batched tokens):
            # 1232 blocks, one kept back by vLLM, so 1231 x 16 tokens.
            ["spec.engine.maxModelLen 19696 or less", "spec.gpus.count 4"],
            id="forced-single-pod-too-small-suggests-shorter-context",
        ),
        pytest.param(
            deployment("org/private-model"),
            "spec.model.architecture",
            ["not in the built-in catalog", "meta-llama/Llama-3.1-8B"],
            id="unknown-model-needs-architecture",
        ),
        pytest.param(
            deployment("Qwen/Qwen2.5-7B", engine={"maxModelLen": 65536}),
            "spec.engine.maxModelLen",
            ["exceeds", "32768"],
            id="context-beyond-catalog-model",
        ),
        pytest.param(
            deployment(L70, gpus=None, engine={"cpuKVCacheGiB": 1}),
            "spec.engine.cpuKVCacheGiB",
            ["less than one 8192-token sequence", "at least 2.5"],
            id="cpu-cache-too-small",
        ),
        pytest.param(
            deployment(L70, autoscaling={"maxReplicas": 1}),
            "spec.autoscaling.maxReplicas",
            ["1 is below minReplicas 2"],
            id="max-replicas-below-planned",
        ),
        pytest.param(
            deployment(L8, engine={"extraArgs": ["--max-model-len", "long"]}),
            "spec.engine.extraArgs",
            ["--max-model-len 'long' is not a whole number"],
            id="unparseable-override",
        ),
    ],
)
def test_refusal_names_field_and_numbers(
    spec: LLMDeploymentSpec, field: str, fragments: list[str]
) -> None:
    error = refusal(spec)

    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    for fragment in fragments:
        assert fragment in error.message


@pytest.mark.parametrize(
    ("autoscaling", "bounds"),
    [
        pytest.param({}, (2, 4), id="defaults-to-planned-and-double"),
        pytest.param({"minReplicas": 1}, (1, 2), id="max-doubles-explicit-min"),
        pytest.param({"maxReplicas": 10}, (2, 10), id="explicit-max"),
        pytest.param({"enabled": False, "minReplicas": 1}, (2, 2), id="disabled-pins-replicas"),
    ],
)
def test_autoscaling_bounds(autoscaling: dict[str, Any], bounds: tuple[int, int]) -> None:
    result = plan(deployment(L70, autoscaling=autoscaling))

    assert (result.min_replicas, result.max_replicas) == bounds


def test_plan_json_has_the_fixed_keys() -> None:
    dumped = plan(deployment(L70)).model_dump(by_alias=True, mode="json")

    for key in (
        "strategy",
        "replicas",
        "gpusPerReplica",
        "tensorParallelSize",
        "weightsGiBPerGPU",
        "kvCacheTokensPerReplica",
        "maxConcurrentSequences",
        "vllmArgs",
        "reason",
    ):
        assert key in dumped
    assert isinstance(dumped["vllmArgs"], list)
    assert Plan.model_validate(dumped) == plan(deployment(L70))


@pytest.mark.parametrize(
    ("spec", "shm", "startup_at_least"),
    [
        pytest.param(deployment(L8), 1, 300, id="single-gpu-small-model"),
        pytest.param(deployment(L70), 7, 1_500, id="tp4-large-model"),
    ],
)
def test_runtime_suggestions_grow_with_layout(
    spec: LLMDeploymentSpec, shm: int, startup_at_least: int
) -> None:
    result = plan(spec)

    assert result.shm_size_gib == shm
    assert result.startup_budget_seconds >= startup_at_least


@pytest.mark.parametrize(
    ("max_model_len", "plans"),
    [
        # 1232 KV blocks per GPU at TP=2: vLLM keeps one back, so 1231 x 16 = 19696 tokens start.
        pytest.param(19_696, True, id="one-block-to-spare"),
        pytest.param(19_712, False, id="every-block-but-the-null-one-missing"),
    ],
)
def test_a_single_pod_needs_a_sequence_beside_the_block_vllm_keeps_back(
    max_model_len: int, plans: bool
) -> None:
    spec = deployment(L70, gpus=2, strategy="SinglePod", engine={"maxModelLen": max_model_len})
    if plans:
        assert plan(spec).tensor_parallel_size == 2
    else:
        assert "spec.engine.maxModelLen 19696 or less" in refusal(spec).message
