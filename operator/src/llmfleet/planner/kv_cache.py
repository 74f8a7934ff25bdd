"""How vLLM lays out a GPU's KV cache: bytes per token per layer and GPU, the layers of a
pipeline stage, and the hybrid layout of models with sliding-window layers (the memory model's
accounting is described in `memory`'s docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from llmfleet.models.engine import KvCacheDtype
from llmfleet.models.model_spec import Dtype, ModelArchitecture

GIB = 1024**3
# vLLM allocates the KV cache in blocks of 16 tokens.
KV_BLOCK_TOKENS = 16
# What a KV cache element is stored as: the activation dtype (kvCacheDtype auto) or the
# kvCacheDtype named.
KvDtype = Literal["auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2"]
_FP8 = ("fp8", "fp8_e4m3", "fp8_e5m2")


def kv_dtype(dtype: Dtype, kv_cache_dtype: KvCacheDtype) -> KvDtype:
    """The KV cache's element type: vLLM's --kv-cache-dtype auto follows the activation dtype,
    whatever the weights."""
    return dtype if kv_cache_dtype == "auto" else kv_cache_dtype


def kv_bytes_per_element(dtype: KvDtype) -> int:
    """vLLM stores fp8 KV as one byte per element (uint8, vllm/utils/torch_utils.py) with one
    scale per layer for keys and one for values, which it loads with the weights, not the
    cache."""
    if dtype in _FP8:
        return 1
    return 4 if dtype == "float32" else 2


def kv_heads_per_gpu(arch: ModelArchitecture, tensor_parallel_size: int) -> int:
    """vLLM shards KV heads over GPUs, and replicates them when TP exceeds their number."""
    return max(1, arch.num_key_value_heads // tensor_parallel_size)


def layers_per_stage(arch: ModelArchitecture, pipeline_parallel_size: int) -> int:
    """The layers of the deepest pipeline stage (vLLM splits them as evenly as it can)."""
    return math.ceil(arch.num_layers / pipeline_parallel_size)


def kv_bytes_per_token_per_layer(
    arch: ModelArchitecture, dtype: KvDtype, tensor_parallel_size: int
) -> int:
    """One token of one layer's KV cache on one GPU: key and value of this GPU's heads, or with
    multi-latent attention the whole latent and rotary key (vLLM keeps them on every GPU)."""
    if arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None:
        return (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_bytes_per_element(dtype)
    heads = kv_heads_per_gpu(arch, tensor_parallel_size)
    return 2 * heads * arch.head_dim * kv_bytes_per_element(dtype)


def kv_bytes_per_token_per_gpu(
    arch: ModelArchitecture,
    dtype: KvDtype,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> int:
    """Every layer of this GPU's pipeline stage holding one token (a full-attention layer does
    for every token of a sequence, a sliding-window one for the window's)."""
    per_layer = kv_bytes_per_token_per_layer(arch, dtype, tensor_parallel_size)
    return layers_per_stage(arch, pipeline_parallel_size) * per_layer


def sliding_layers(arch: ModelArchitecture) -> int:
    """Layers that attend to a sliding window; 0 without one."""
    if arch.sliding_window is None:
        return 0
    if arch.sliding_window_layers is None:
        return arch.num_layers
    return arch.sliding_window_layers


@dataclass(frozen=True)
class KvLayout:
    """How vLLM lays out one GPU's KV cache: blocks of `block_bytes` (KV_BLOCK_TOKENS tokens of
    `group_size` layers), which every sequence takes in each of `full_groups` groups of
    full-attention layers and `sliding_groups` groups of sliding-window layers."""

    bytes_per_token: int  # every layer of the stage
    block_bytes: int
    full_groups: int = 1
    sliding_groups: int = 0
    # Tokens a sliding-window layer holds of one sequence: the window less one plus the tokens
    # of the steps in flight (vLLM 0.32's SlidingWindowSpec.max_admission_blocks_per_request).
    sliding_tokens_held: int = 0

    def blocks(self, gib: float) -> int:
        return int(gib * GIB) // self.block_bytes if gib > 0 else 0

    def tokens(self, blocks: int, max_model_len: int | None = None) -> int:
        """What vLLM logs as "GPU KV cache size: N tokens" (and exports as cache_config_info's
        kv_cache_size_tokens): the sequences of `max_model_len` the blocks hold, in tokens
        (vLLM's get_kv_cache_capacity); without a length, the blocks shared by the groups."""
        if max_model_len is None:
            return blocks // (self.full_groups + self.sliding_groups) * KV_BLOCK_TOKENS
        return int(blocks / self.blocks_per_sequence(max_model_len) * max_model_len)

    def blocks_per_sequence(self, length: int) -> int:
        full = self.full_groups * math.ceil(length / KV_BLOCK_TOKENS)
        held = min(self.sliding_tokens_held, length)
        return full + self.sliding_groups * (math.ceil(held / KV_BLOCK_TOKENS) + 1)

    def sequence_gib(self, length: int) -> float:
        """KV cache one `length`-token sequence takes."""
        if not self.sliding_groups:
            return self.bytes_per_token * length / GIB
        return self.blocks_per_sequence(length) * self.block_bytes / GIB


def kv_layout(
    arch: ModelArchitecture,
    dtype: KvDtype,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
    max_num_batched_tokens: int = 0,
) -> KvLayout:
    per_layer = kv_bytes_per_token_per_layer(arch, dtype, tensor_parallel_size)
    stage = layers_per_stage(arch, pipeline_parallel_size)
    sliding = sliding_layers(arch)
    full = arch.num_layers - sliding
    window = arch.sliding_window or 0
    # vLLM 0.32 schedules asynchronously by default: pipeline stages + 1 steps in flight
    # (VllmConfig.max_concurrent_batches), each of up to max_num_batched_tokens, whose blocks a
    # sliding layer keeps until they settle. Measured: Gemma 3 27B at 32k, 16384 batched tokens,
    # vLLM 0.26.0 logs a concurrency of 4.11 = blocks / (7 groups x 2048 + 6); one step in
    # flight would give 6.9.
    held = window - 1 + (pipeline_parallel_size + 1) * max_num_batched_tokens
    if not sliding:
        return KvLayout(stage * per_layer, stage * per_layer * KV_BLOCK_TOKENS)
    if not full:
        return KvLayout(stage * per_layer, stage * per_layer * KV_BLOCK_TOKENS, 0, 1, held)
    # vLLM's _get_kv_cache_groups_uniform_page_size: groups as large as the rarer kind, or the
    # commoner kind's count when the two are within 1.5x, the last group of a kind padded.
    size = min(full, sliding)
    if max(full, sliding) < 1.5 * size:
        size = max(full, sliding)
    # Each stage holds its share of every group (vLLM assigns layers to groups round-robin).
    stage_size = math.ceil(size / pipeline_parallel_size)
    return KvLayout(
        stage * per_layer,
        stage_size * per_layer * KV_BLOCK_TOKENS,
        math.ceil(full / size),
        math.ceil(sliding / size),
        held,
    )


def kv_tokens_in(gib: float, bytes_per_token: int) -> int:
    """Whole KV blocks that fit in `gib`, as tokens."""
    if gib <= 0:
        return 0
    blocks = int(gib * GIB) // (bytes_per_token * KV_BLOCK_TOKENS)
    return blocks * KV_BLOCK_TOKENS
