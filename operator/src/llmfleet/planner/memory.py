"""How much of a GPU the weights, the runtime and the KV cache take.

The model follows vLLM's own accounting (vLLM 0.26.0's gpu_worker log: "Desired GPU memory
utilization is (0.9, 71.26 GiB). Actual usage is 15.0 GiB for weight, 1.72 GiB for peak
activation, 0.22 GiB for non-torch memory"): vLLM may use `gpuMemoryUtilization` of the memory
CUDA reports for the GPU; it loads its shard of the weights, profiles a forward pass of
`maxNumBatchedTokens` tokens to find the activation peak, and gives the rest to the KV cache.

* CUDA reports less than the datasheet's memory: 79.18 GiB on an H100 80GB HBM3
  (torch.cuda.mem_get_info, bench/gpu/ 2026-11-23/24). `memoryGiB` is the datasheet figure, so
  the planner takes CUDA_UNREACHABLE_GIB off it before applying the utilization, or uses the GPU
  profile's `cudaGiB` where it was measured (H100 80GB 79.18, H200 139.8: memoryGiB 140 less
  0.82 erred 0.6 GiB low, 9 % of a tight fit's KV cache).
* `RUNTIME_RESERVE_GIB + maxNumBatchedTokens x activation bytes per token` stands in for the
  profile run (activation_peak.py). Per token, the MLP's gate/up output (2 x intermediate) and
  its activated half (intermediate), 16 bits each, live at once: MLP_BYTES_PER_UNIT = 6 bytes
  per intermediate unit; the residual stream, attention output and norms add
  RESIDUAL_BYTES_PER_UNIT = 7 bytes per hidden unit. vLLM 0.26.0 measured at 16384 batched
  tokens (bench/gpu/): Llama-3.1-8B 1.72-1.78 GiB (this rule: 1.75), Qwen2.5-7B, whose MLP is
  5.3 x hidden, 2.14 (2.12; the earlier rule of 28 bytes per hidden unit, exact for Llama's
  3.5 x, gave 1.53 and planned 11 % too many KV tokens on a tight fit). Without
  intermediateSize the MLP counts as Llama's (3.5 x hidden). Tensor parallelism splits the MLP
  term over the GPUs and not the hidden one: Llama-3.1-8B at TP 2 peaked at 1.06 GiB per GPU
  (this rule: 1.09; 2 x H200, 2026-11-25). 0.22 GiB of non-torch memory is in the 0.3.
* Two starts, two peaks. A start that loads an earlier start's torch.compile cache (the log's
  "Directly load the compiled graph"; spec.engine.compileCache keeps it for every pod after
  the first) profiles the compiled, fused forward: the rule above for 16-bit weights and w4a16
  (bf16 8B 1.72, the held-out wide shape 2.09 against 2.12, AWQ/GPTQ Qwen2.5-7B 2.12), and
  for w8a8 weights (fp8 on load, fp8 checkpoints, compressed-tensors float8/int8 W8A8), whose
  kernels quantize the GEMM inputs to 8 bits, W8A8_SAVED_BYTES_PER_UNIT x (intermediate/TP +
  hidden) bytes per token less: Llama-3.1-8B 1.47 GiB at 16384 and 0.73 at 8192 (as measured,
  checkpoint and on-load alike), Llama-3.1-70B 2.94 (2.99-3.0 measured). A start that
  compiles afresh also counts the compile's own buffers: at 16384 about the 16-bit rule for
  every format (8B fp8 1.78, 70B fp8 3.56), at 8192 1.13 GiB where the rule gives 0.88 (one
  point only, 8B fp8 on an H200, 2026-11-27: not modelled). The plan's KV cache is the fresh
  compile's, the safe one the first pod gets; GpuFit.kv_tokens_compile_cached is the other.
* Tensor parallelism's communication buffers (NCCL's communicator, 0.82 GiB per GPU measured on
  2 x H200, and vLLM's custom all-reduce, 24 MiB) are allocated before vLLM's startup snapshot
  and its budget is the utilization times the GPU's whole memory, so they come out of the
  headroom above gpuMemoryUtilization, not the KV cache: at TP 2 vLLM's KV cache was exactly
  the budget less weights, activation peak and 0.07 GiB of non-torch memory.
  CUDA graphs (0.1-1.3 GiB) come out of the headroom above the utilization on vLLM 0.26.0's V2
  runner; its V1 runner (MoE outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, e.g. gpt-oss) takes
  an estimate from the KV cache, not modelled (docs/planner.md, the mxfp4 row).
* Weights: parameters x bytes per weight; with fp8 (quantized on load) vLLM keeps the
  embeddings and the output head in 16 bits ("Model loading took 67.73 GiB" for Llama-3.1-70B,
  65.75 GiB at 8 bits throughout), so they count at 2 bytes where the architecture gives a
  vocabulary size. A pre-quantized checkpoint read from its config.json is summed from its
  layers as its format stores them, scales and 16-bit modules included (planner/weights.py).
* KV cache dtype: the activation dtype, or 1 byte per element with spec.engine.kvCacheDtype
  fp8 (kv_cache.kv_dtype).
* KV cache: vLLM's KV cache manager (vllm/v1/core/kv_cache_utils.py) cuts it into blocks of
  KV_BLOCK_TOKENS tokens. With full attention only, a block holds those tokens for every layer
  and a sequence of L tokens takes ceil(L / 16) blocks. With sliding-window layers beside full
  ones (Gemma 2/3) it groups the layers by kind into groups of equal size (the smaller kind's
  count, padded), a block holds one group's tokens, and a sequence takes ceil(L / 16) blocks in
  each full-attention group but only ceil(min(window - 1 + in-flight tokens, L) / 16) + 1 in
  each sliding one (kv_cache.kv_layout). vLLM reports `num_blocks / blocks per sequence` as its
  concurrency and that times maxModelLen as its tokens ("GPU KV cache size"); the planner's
  sequences and kv_tokens are those two figures. Multi-latent attention (DeepSeek) caches
  kvLoraRank + qkRopeHeadDim values per token per layer on every tensor-parallel GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.engine import KvCacheDtype
from llmfleet.models.model_spec import Dtype, ModelArchitecture, Quantization
from llmfleet.planner.activation_peak import runtime_reserve_gib
from llmfleet.planner.kv_cache import (
    KV_BLOCK_TOKENS,
    KvLayout,
    kv_bytes_per_token_per_layer,
    kv_dtype,
    kv_layout,
)
from llmfleet.planner.pipeline_stages import passes_kv_check, stage_layers, stage_weights_gib
from llmfleet.planner.weights import Weights, as_weights

GIB = 1024**3
CUDA_UNREACHABLE_GIB = 0.82

_DTYPE_BYTES: dict[Dtype, float] = {"auto": 2, "bfloat16": 2, "float16": 2, "float32": 4}
_QUANTIZED_BYTES: dict[Quantization, float] = {"fp8": 1, "int8": 1, "awq": 0.5, "gptq": 0.5}


def bytes_per_weight(dtype: Dtype, quantization: Quantization) -> float:
    if quantization == "none":
        return _DTYPE_BYTES[dtype]
    return _QUANTIZED_BYTES[quantization]


def embedding_parameters(arch: ModelArchitecture) -> float:
    """The input embeddings and the output head (one matrix when tied); 0 when unknown."""
    if arch.vocab_size is None:
        return 0.0
    matrices = 1 if arch.tie_word_embeddings else 2
    return float(matrices * arch.vocab_size * arch.num_attention_heads * arch.head_dim)


def weights_gib(
    arch: ModelArchitecture,
    dtype: Dtype,
    quantization: Quantization | Weights,
    tensor_parallel_size: int = 1,
) -> float:
    """All weights as vLLM holds them over `tensor_parallel_size` GPUs (a pre-quantized
    checkpoint's padded experts grow with it)."""
    weights = as_weights(dtype, quantization)
    if weights.checkpoint is not None:
        return weights.checkpoint.allocated_bytes(tensor_parallel_size) / GIB
    quantization = weights.quantization
    total = arch.parameters_billions * 1e9 * bytes_per_weight(dtype, quantization)
    if quantization == "fp8":
        # vLLM's online fp8 quantizes the linear layers only: the embeddings and the output
        # head stay in the 16-bit activation dtype.
        embeddings = embedding_parameters(arch)
        total += embeddings * (_DTYPE_BYTES[dtype] - bytes_per_weight(dtype, quantization))
    return total / GIB


def usable_gib(memory_gib: float, cuda_gib: float | None = None) -> float:
    """What CUDA reports of a GPU of `memory_gib` (datasheet) GiB: `cuda_gib` where measured."""
    if cuda_gib is not None:
        return cuda_gib
    return max(0.0, memory_gib - CUDA_UNREACHABLE_GIB)


def budget_gib(
    memory_gib: float, gpu_memory_utilization: float, cuda_gib: float | None = None
) -> float:
    """What vLLM may use of one GPU."""
    return round_down(usable_gib(memory_gib, cuda_gib) * gpu_memory_utilization)


def memory_for_budget(needed_gib: float, gpu_memory_utilization: float) -> float:
    """The datasheet memory (GiB) of a GPU that gives vLLM `needed_gib`."""
    return needed_gib / gpu_memory_utilization + CUDA_UNREACHABLE_GIB


def round_up(gib: float) -> float:
    return math.ceil(round(gib * 100, 6)) / 100


def round_down(gib: float) -> float:
    return math.floor(round(gib * 100, 6)) / 100


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
    lora_gib: float = 0.0  # vLLM's LoRA buffers, allocated with the weights
    kv_layout: KvLayout | None = None  # None: full attention only
    # The pipeline stage whose KV cache is smallest (0-based): vLLM gives every stage its
    # block count, and its figures are the ones above.
    stage: int = 0
    # kv_tokens of an engine that loads an earlier start's compile cache (a lower activation
    # peak for w8a8 weights); the figures above are a fresh compile's, which plans are made by.
    kv_tokens_compile_cached: int = 0

    def sequences(self, max_model_len: int) -> int:
        """Sequences of `max_model_len` tokens the KV cache holds at once."""
        layout = self.kv_layout
        if layout is None or not layout.sliding_groups:
            return self.kv_tokens // max_model_len
        return layout.blocks(self.kv_cache_gib) // layout.blocks_per_sequence(max_model_len)

    def blocks(self) -> int:
        """vLLM's num_gpu_blocks: the KV blocks of every stage."""
        layout = self.kv_layout
        if layout is None or not layout.sliding_groups:
            return self.kv_tokens // KV_BLOCK_TOKENS
        return layout.blocks(self.kv_cache_gib)

    def blocks_per_sequence(self, max_model_len: int) -> int:
        layout = self.kv_layout
        if layout is None or not layout.sliding_groups:
            return math.ceil(max_model_len / KV_BLOCK_TOKENS)
        return layout.blocks_per_sequence(max_model_len)

    def starts(self, max_model_len: int) -> bool:
        """Whether vLLM's start-up KV cache check passes (`pipeline_stages`)."""
        return passes_kv_check(self.blocks(), self.blocks_per_sequence(max_model_len))

    def longest_start(self, below: int) -> int:
        """The longest maxModelLen under `below` that passes vLLM's start-up check (0: none),
        found by bisection as vLLM's estimate_max_model_len does."""
        low, high = 0, below - 1
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if self.starts(middle) else (low, middle - 1)
        return low


def routed_expert_bytes(
    arch: ModelArchitecture, dtype: Dtype, quantization: Quantization | Weights, routed: float
) -> float:
    """The routed experts' weights (`routed` parameters) as `weights_gib` counts them."""
    weights = as_weights(dtype, quantization)
    if weights.checkpoint is not None:
        return weights.checkpoint.routed_expert_bytes
    return routed * bytes_per_weight(dtype, weights.quantization)


def embedding_matrix_gib(
    arch: ModelArchitecture, dtype: Dtype, quantization: Quantization | Weights
) -> float:
    """One vocabulary x hidden matrix, in 16 bits under fp8 as `weights_gib` counts it."""
    weights = as_weights(dtype, quantization)
    if weights.checkpoint is not None:
        return weights.checkpoint.embedding_matrix_bytes / GIB
    matrices = 1 if arch.tie_word_embeddings else 2
    quantized = "none" if weights.quantization == "fp8" else weights.quantization
    return embedding_parameters(arch) / matrices * bytes_per_weight(dtype, quantized) / GIB


def fit_on_gpu(
    arch: ModelArchitecture,
    *,
    dtype: Dtype,
    quantization: Quantization | Weights,
    memory_gib: float,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
    lora_gib: float = 0.0,
    cuda_gib: float | None = None,
    max_model_len: int | None = None,
    kv_cache_dtype: KvCacheDtype = "auto",
) -> GpuFit:
    """One GPU of a replica of `tensor_parallel_size` x `pipeline_parallel_size` GPUs, with
    `lora_gib` of LoRA buffers: with pipeline parallelism, a GPU of the stage with the fewest KV
    blocks (each stage's own layers and weights, `pipeline_stages`), whose count vLLM gives all.
    A hybrid (sliding-window) model's tokens are vLLM's for `max_model_len` when given."""
    budget = budget_gib(memory_gib, gpu_memory_utilization, cuda_gib)
    held = as_weights(dtype, quantization)
    kernel, triton = held.kernel, held.triton_experts
    kv = kv_dtype(dtype, kv_cache_dtype)
    layout = kv_layout(
        arch, kv, tensor_parallel_size, pipeline_parallel_size, max_num_batched_tokens
    )
    layers = stage_layers(arch.num_layers, pipeline_parallel_size)
    stage_weights = stage_weights_gib(
        weights_gib(arch, dtype, quantization, tensor_parallel_size),
        embedding_matrix_gib(arch, dtype, quantization),
        1 if arch.tie_word_embeddings else 2,
        layers,
    )
    per_layer_block = kv_bytes_per_token_per_layer(arch, kv, tensor_parallel_size) * KV_BLOCK_TOKENS

    def smallest_stage(reserve: float) -> tuple[int, int, float, float, int]:
        """(stage, blocks, weights, KV cache GiB, tokens) of the stage with the fewest blocks."""
        stages: list[tuple[int, float, float]] = []  # (blocks, weights, KV cache GiB)
        for count, stage_gib in zip(layers, stage_weights, strict=True):
            weights = round_up(stage_gib / tensor_parallel_size)
            kv_cache = round_down(budget - weights - reserve - lora_gib)
            # A hybrid layout's block is its deepest stage's (kv_layout), the most any takes.
            block = layout.block_bytes if layout.sliding_groups else count * per_layer_block
            stages.append((int(kv_cache * GIB) // block if kv_cache > 0 else 0, weights, kv_cache))
        stage = min(range(len(stages)), key=lambda index: stages[index][0])
        blocks, weights, kv_cache = stages[stage]
        tokens = (
            layout.tokens(blocks, max_model_len)
            if layout.sliding_groups
            else blocks * KV_BLOCK_TOKENS
        )
        return stage, blocks, weights, kv_cache, tokens

    shape = (arch, max_num_batched_tokens, tensor_parallel_size)
    reserve = round_up(runtime_reserve_gib(*shape, triton_experts=triton))
    stage, _, weights, kv_cache, tokens = smallest_stage(reserve)
    cached_reserve = round_up(runtime_reserve_gib(*shape, kernel, triton))
    cached_tokens = smallest_stage(cached_reserve)[4] if cached_reserve < reserve else tokens
    return GpuFit(
        tensor_parallel_size,
        budget,
        weights,
        reserve,
        kv_cache,
        tokens,
        lora_gib,
        layout if layout.sliding_groups else None,
        stage,
        cached_tokens,
    )
