"""How much of a GPU the weights, the runtime and the KV cache take.

The model follows vLLM's own accounting: vLLM may use `memoryGiB x gpuMemoryUtilization` of each
GPU; it loads its shard of the weights, profiles a forward pass of `maxNumBatchedTokens` tokens
to find the activation peak, and gives the rest to the KV cache.

`RUNTIME_RESERVE_GIB + maxNumBatchedTokens x hidden size x ACTIVATION_BYTES_PER_TOKEN_UNIT`
stands in for that profile. 1.5 GiB covers the CUDA context, NCCL buffers and CUDA graphs
(vLLM captures graphs for batch sizes up to 512). 16 bytes per token per hidden unit is a
few bf16 copies of the residual stream plus the MLP intermediate (about 3.5 x hidden) and the
sampler's logits, kept unsharded so the estimate errs high: 1 GiB for Llama-3.1-70B at 8192
batched tokens, 0.5 GiB for an 8B model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.model_spec import Dtype, ModelArchitecture, Quantization

GIB = 1024**3
RUNTIME_RESERVE_GIB = 1.5
ACTIVATION_BYTES_PER_TOKEN_UNIT = 16
# vLLM allocates the KV cache in blocks of 16 tokens.
KV_BLOCK_TOKENS = 16

_DTYPE_BYTES: dict[Dtype, float] = {"auto": 2, "bfloat16": 2, "float16": 2, "float32": 4}
_QUANTIZED_BYTES: dict[Quantization, float] = {"fp8": 1, "int8": 1, "awq": 0.5, "gptq": 0.5}


def bytes_per_weight(dtype: Dtype, quantization: Quantization) -> float:
    if quantization == "none":
        return _DTYPE_BYTES[dtype]
    return _QUANTIZED_BYTES[quantization]


def kv_bytes_per_element(dtype: Dtype) -> int:
    """The KV cache uses the activation dtype (vLLM's kv_cache_dtype auto), whatever the weights."""
    return 4 if dtype == "float32" else 2


def weights_gib(arch: ModelArchitecture, dtype: Dtype, quantization: Quantization) -> float:
    return arch.parameters_billions * 1e9 * bytes_per_weight(dtype, quantization) / GIB


def kv_heads_per_gpu(arch: ModelArchitecture, tensor_parallel_size: int) -> int:
    """vLLM shards KV heads over GPUs, and replicates them when TP exceeds their number."""
    return max(1, arch.num_key_value_heads // tensor_parallel_size)


def layers_per_stage(arch: ModelArchitecture, pipeline_parallel_size: int) -> int:
    """The layers of the deepest pipeline stage (vLLM splits them as evenly as it can)."""
    return math.ceil(arch.num_layers / pipeline_parallel_size)


def kv_bytes_per_token_per_gpu(
    arch: ModelArchitecture,
    dtype: Dtype,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> int:
    """Key and value, every layer of this GPU's pipeline stage, this GPU's heads."""
    return (
        2
        * layers_per_stage(arch, pipeline_parallel_size)
        * kv_heads_per_gpu(arch, tensor_parallel_size)
        * arch.head_dim
        * kv_bytes_per_element(dtype)
    )


def runtime_reserve_gib(arch: ModelArchitecture, max_num_batched_tokens: int) -> float:
    hidden_units = arch.num_attention_heads * arch.head_dim
    activations = max_num_batched_tokens * hidden_units * ACTIVATION_BYTES_PER_TOKEN_UNIT
    return RUNTIME_RESERVE_GIB + activations / GIB


def round_up(gib: float) -> float:
    return math.ceil(round(gib * 100, 6)) / 100


def round_down(gib: float) -> float:
    return math.floor(round(gib * 100, 6)) / 100


def kv_tokens_in(gib: float, bytes_per_token: int) -> int:
    """Whole KV blocks that fit in `gib`, as tokens."""
    if gib <= 0:
        return 0
    blocks = int(gib * GIB) // (bytes_per_token * KV_BLOCK_TOKENS)
    return blocks * KV_BLOCK_TOKENS


@dataclass(frozen=True)
class GpuFit:
    """One GPU's memory at one tensor-parallel size. Figures are GiB, rounded to 0.01 so that
    the reported weights + reserve + KV cache never exceed the budget."""

    tensor_parallel_size: int
    budget_gib: float
    weights_gib: float
    reserve_gib: float
    kv_cache_gib: float
    kv_tokens: int

    def sequences(self, max_model_len: int) -> int:
        """Full-length sequences the KV cache holds at once."""
        return self.kv_tokens // max_model_len


def fit_on_gpu(
    arch: ModelArchitecture,
    *,
    dtype: Dtype,
    quantization: Quantization,
    memory_gib: float,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> GpuFit:
    """One GPU of a replica of `tensor_parallel_size` x `pipeline_parallel_size` GPUs: its shard
    of its stage's layers (the deepest stage: the one that fills first)."""
    budget = round_down(memory_gib * gpu_memory_utilization)
    stage_share = layers_per_stage(arch, pipeline_parallel_size) / arch.num_layers
    weights = round_up(weights_gib(arch, dtype, quantization) * stage_share / tensor_parallel_size)
    reserve = round_up(runtime_reserve_gib(arch, max_num_batched_tokens))
    kv_cache = round_down(budget - weights - reserve)
    per_token = kv_bytes_per_token_per_gpu(
        arch, dtype, tensor_parallel_size, pipeline_parallel_size
    )
    tokens = kv_tokens_in(kv_cache, per_token)
    return GpuFit(tensor_parallel_size, budget, weights, reserve, kv_cache, tokens)
