"""vLLM's command line: derived flags, explicit engine fields and extraArgs overrides."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan

L8 = "meta-llama/Llama-3.1-8B-Instruct"


def args_for(model: dict[str, Any] | None = None, gpus: int | None = 1, **spec: Any) -> list[str]:
    manifest: dict[str, Any] = {"model": {"name": L8, **(model or {})}, **spec}
    if gpus is not None:
        manifest["gpus"] = {"count": gpus, "memoryGiB": 80}
    return list(plan(LLMDeploymentSpec.model_validate(manifest)).vllm_args)


def flag_value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_derived_args_in_fixed_order_without_the_model() -> None:
    # The model is no flag: `vllm serve` takes it first (render/engine.py).
    assert args_for() == [
        "--dtype", "auto",
        "--tensor-parallel-size", "1",
        "--max-model-len", "8192",
        "--gpu-memory-utilization", "0.9",
        "--max-num-seqs", "512",
        "--max-num-batched-tokens", "16384",
        "--scheduling-policy", "fcfs",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "flag", "value"),
    [
        pytest.param(
            {"model": {"servedModelName": "llama"}},
            "--served-model-name",
            "llama",
            id="served-name-when-set",
        ),
        pytest.param({}, "--served-model-name", None, id="no-served-name-by-default"),
        pytest.param(
            {"model": {"quantization": "fp8"}}, "--quantization", "fp8", id="fp8-quantizes-on-load"
        ),
        pytest.param(
            {"model": {"quantization": "awq"}},
            "--quantization",
            None,
            id="awq-left-to-checkpoint-detection",
        ),
        pytest.param({"model": {"dtype": "float16"}}, "--dtype", "float16", id="dtype"),
        pytest.param(
            {"engine": {"maxNumSeqs": 64}}, "--max-num-seqs", "64", id="explicit-max-num-seqs-wins"
        ),
        pytest.param(
            {"engine": {"maxNumBatchedTokens": 4096}},
            "--max-num-batched-tokens",
            "4096",
            id="explicit-batched-tokens-win",
        ),
        pytest.param(
            {}, "--max-num-batched-tokens", "16384", id="throughput-uses-16k-prefill-chunks-on-gpus"
        ),
        pytest.param(
            {"objective": "Latency"},
            "--max-num-batched-tokens",
            "8192",
            id="latency-uses-half-the-prefill-chunk-on-gpus",
        ),
        pytest.param(
            {"gpus": None}, "--max-num-batched-tokens", "8192", id="cpu-throughput-uses-8k-chunks"
        ),
        pytest.param(
            {"gpus": None, "objective": "Latency"},
            "--max-num-batched-tokens",
            "2048",
            id="cpu-latency-uses-small-prefill-chunks",
        ),
        pytest.param(
            {"engine": {"maxModelLen": 2048}},
            "--max-model-len",
            "2048",
            id="explicit-context-length",
        ),
        pytest.param(
            {"engine": {"gpuMemoryUtilization": 0.85}},
            "--gpu-memory-utilization",
            "0.85",
            id="explicit-utilization",
        ),
        pytest.param(
            {"engine": {"schedulingPolicy": "priority"}},
            "--scheduling-policy",
            "priority",
            id="priority-scheduling",
        ),
        pytest.param(
            {"gpus": None}, "--gpu-memory-utilization", None, id="cpu-only-has-no-gpu-flag"
        ),
    ],
)
def test_flag(kwargs: dict[str, Any], flag: str, value: str | None) -> None:
    assert flag_value(args_for(**kwargs), flag) == value


@pytest.mark.parametrize(
    ("gpus", "chunks"),
    [
        pytest.param({"count": 1, "memoryGiB": 80}, (16384, 8192), id="gpu-of-70-gib-or-more"),
        pytest.param({"count": 1, "memoryGiB": 48}, (8192, 2048), id="smaller-gpu"),
        pytest.param(None, (8192, 2048), id="cpu"),
    ],
)
def test_latency_prefills_in_smaller_chunks_than_throughput(
    gpus: dict[str, Any] | None, chunks: tuple[int, int]
) -> None:
    def chunk(objective: str) -> int:
        manifest: dict[str, Any] = {"model": {"name": L8}, "objective": objective}
        if gpus is not None:
            manifest["gpus"] = gpus
        return plan(LLMDeploymentSpec.model_validate(manifest)).max_num_batched_tokens

    assert (chunk("Throughput"), chunk("Latency")) == chunks
    assert chunk("Latency") < chunk("Throughput")


@pytest.mark.parametrize(
    ("memory_gib", "spec", "seqs"),
    [
        # 80 GiB: (80 - 0.82 CUDA does not report) x 0.9 = 71.26 usable - 14.96 weights - 2.05
        # reserve (16384 batched tokens) = 54.25 GiB of KV cache at 128 KiB per token = 444,416
        # tokens (vLLM: 444,528-444,928 on an H100); // 768 = 578, capped at 512.
        pytest.param(80, {}, 512, id="capped-at-512-cuda-graph-batches"),
        # 24 GiB (below 70 GiB: 8192 batched tokens, a 1.18 GiB reserve): 20.86 - 14.96 - 1.18
        # = 4.72 GiB = 38,656 tokens; // (512 + 256) = 50.
        pytest.param(24, {}, 50, id="kv-bound-default-512-plus-256-workload"),
        # 444,416 // (4096 + 1024) = 86.
        pytest.param(
            80,
            {"workload": {"promptTokens": 4096, "outputTokens": 1024}},
            86,
            id="kv-bound-by-a-longer-workload",
        ),
        # maxModelLen 512 < 768: the default workload shrinks to 341 + 171 = 512 tokens, so
        # 38,656 // 512 = 75 (not 38,656 // 768 = 50).
        pytest.param(24, {"engine": {"maxModelLen": 512}}, 75, id="workload-shrinks-to-context"),
    ],
)
def test_max_num_seqs_is_what_the_kv_cache_holds_of_the_workload(
    memory_gib: int, spec: dict[str, Any], seqs: int
) -> None:
    manifest = {"model": {"name": L8}, "gpus": {"count": 1, "memoryGiB": memory_gib}, **spec}
    result = plan(LLMDeploymentSpec.model_validate(manifest))

    assert result.max_concurrent_sequences == seqs
    assert flag_value(list(result.vllm_args), "--max-num-seqs") == str(seqs)


PINNED = [
    "--dtype", "auto",
    "--tensor-parallel-size", "1",
    "--max-model-len", "8192",
    "--gpu-memory-utilization", "0.9",
    "--max-num-seqs", "16",
    "--max-num-batched-tokens", "16384",
    "--scheduling-policy", "fcfs",
]  # fmt: skip


def pinned_with(flag: str, tokens: list[str]) -> list[str]:
    at = PINNED.index(flag)
    return [*PINNED[:at], *tokens, *PINNED[at + 2 :]]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            ["--max-model-len=4096"],
            pinned_with("--max-model-len", ["--max-model-len=4096"]),
            id="equals-form-replaces-in-place",
        ),
        pytest.param(
            ["--max_num_seqs", "32"],
            pinned_with("--max-num-seqs", ["--max_num_seqs", "32"]),
            id="underscore-spelling-is-the-same-flag",
        ),
        pytest.param(
            ["--enforce-eager", "--dtype", "bfloat16"],
            [*pinned_with("--dtype", ["--dtype", "bfloat16"]), "--enforce-eager"],
            id="override-in-place-others-appended",
        ),
        pytest.param(
            ["-q", "compressed-tensors"],
            [*PINNED, "-q", "compressed-tensors"],
            id="flag-not-derived-is-appended",
        ),
        pytest.param(
            ["--override-generation-config", '{"temperature": 0.2}', "--seed", "-1"],
            [*PINNED, "--override-generation-config", '{"temperature": 0.2}', "--seed", "-1"],
            id="values-stay-with-their-flags",
        ),
    ],
)
def test_extra_args_replace_the_derived_flag(extra: list[str], expected: list[str]) -> None:
    assert args_for(engine={"maxNumSeqs": 16, "extraArgs": extra}) == expected


@pytest.mark.parametrize(
    ("extra", "field", "value"),
    [
        pytest.param(["--max-model-len", "4k"], "max_model_len", 4000, id="human-readable-length"),
        pytest.param(["--max-model-len=2048"], "max_model_len", 2048, id="context-override"),
        pytest.param(["--max-num-seqs", "12"], "max_concurrent_sequences", 12, id="seqs-override"),
        pytest.param(
            ["--max-num-batched-tokens", "1024"], "max_num_batched_tokens", 1024, id="batch"
        ),
    ],
)
def test_numeric_overrides_feed_the_plan(extra: list[str], field: str, value: int) -> None:
    manifest = {
        "model": {"name": L8},
        "gpus": {"count": 1, "memoryGiB": 80},
        "engine": {"extraArgs": extra},
    }
    assert getattr(plan(LLMDeploymentSpec.model_validate(manifest)), field) == value


def test_utilization_override_shrinks_the_kv_cache() -> None:
    base = {"model": {"name": L8}, "gpus": {"count": 1, "memoryGiB": 80}}
    lower = {**base, "engine": {"extraArgs": ["--gpu-memory-utilization=0.5"]}}

    default_tokens = plan(LLMDeploymentSpec.model_validate(base)).kv_cache_tokens_per_replica
    lower_tokens = plan(LLMDeploymentSpec.model_validate(lower)).kv_cache_tokens_per_replica
    assert lower_tokens < default_tokens / 2


@pytest.mark.parametrize("gpus", [pytest.param(1, id="gpu"), pytest.param(None, id="cpu")])
def test_host_and_port_are_left_to_the_renderer(gpus: int | None) -> None:
    args = args_for(gpus=gpus)

    assert not {"--host", "--port"} & set(args)
