"""The activation reserve against the peaks vLLM 0.26.0 measured in its profile run at 16384
batched tokens on an H100/H200 (bench/gpu/logs/: "Actual usage is ... GiB for peak
activation"), fresh torch.compile where the engine compiled in that run."""

from __future__ import annotations

import pytest

from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.planner.activation_peak import (
    GIB,
    activation_bytes_per_token,
    batched_tokens_within,
)
from llmfleet.planner.memory import fit_on_gpu

BATCHED = 16384


@pytest.mark.parametrize(
    ("model", "measured_gib"),
    [
        ("meta-llama/Llama-3.1-8B", 1.77),  # plan-8b.log (1.72-1.78 over 12 engines)
        ("Qwen/Qwen2.5-7B", 2.14),  # qwen7b-u080-16k.log: MLP 5.3 x hidden
        ("meta-llama/Llama-3.1-70B", 3.56),  # h200-70b-fp8.log, the first (compiling) start
    ],
)
def test_the_activation_reserve_is_within_3_percent_of_vllms_measured_peak(
    model: str, measured_gib: float
) -> None:
    arch = lookup_architecture(model)
    assert arch is not None
    predicted = BATCHED * activation_bytes_per_token(arch) / GIB
    assert predicted == pytest.approx(measured_gib, rel=0.03)


def test_a_wider_mlp_reserves_more_than_the_hidden_size_alone_would() -> None:
    qwen = lookup_architecture("Qwen/Qwen2.5-7B")
    assert qwen is not None
    without_width = qwen.model_copy(update={"intermediate_size": None})
    assert activation_bytes_per_token(qwen) > activation_bytes_per_token(without_width) * 1.3


def test_batched_tokens_within_a_reserve_inverts_the_reserve() -> None:
    arch = lookup_architecture("Qwen/Qwen2.5-7B")
    assert arch is not None
    reserve = 0.3 + BATCHED * activation_bytes_per_token(arch) / GIB
    assert batched_tokens_within(arch, reserve) in (BATCHED - 1, BATCHED)


def test_tensor_parallel_kv_cache_matches_vllm_with_the_mlp_split_and_no_nccl_reserve() -> None:
    """Llama-3.1-8B at TP 2 on 2 x H200 (vLLM 0.26.0, 2026-11-25, bench/gpu/): 1.06 GiB
    activation peak and 0.07 GiB non-torch per GPU, 1,919,536 KV tokens; NCCL's buffers were
    allocated before vLLM's startup snapshot, outside its budget."""
    arch = lookup_architecture("meta-llama/Llama-3.1-8B")
    assert arch is not None
    fit = fit_on_gpu(
        arch,
        dtype="bfloat16",
        quantization="none",
        memory_gib=139.8 + 0.82,  # what CUDA reported, as a datasheet figure
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=BATCHED,
        tensor_parallel_size=2,
    )
    assert fit.reserve_gib == pytest.approx(1.06 + 0.07, abs=0.3)
    assert fit.kv_tokens == pytest.approx(1_919_536, rel=0.01)
