"""How much of a GPU the weights, the runtime and the KV cache take.

The model follows vLLM's own accounting (vLLM 0.26.0's gpu_worker log: "Desired GPU memory
utilization is (0.9, 71.26 GiB). Actual usage is 15.0 GiB for weight, 1.72 GiB for peak
activation, 0.22 GiB for non-torch memory"): vLLM may use `gpuMemoryUtilization` of the memory
CUDA reports for the GPU; it loads its shard of the weights, profiles a forward pass of
`maxNumBatchedTokens` tokens to find the activation peak, and gives the rest to the KV cache.

* CUDA reports less than the datasheet's memory: 79.18 GiB on an H100 80GB HBM3
  (torch.cuda.mem_get_info, bench/gpu/ 2026-11-23/24). `memoryGiB` is the datasheet figure, so
  the planner takes CUDA_UNREACHABLE_GIB off it before applying the utilization. (An H200,
  profile 140 GiB, reports 139.8: this errs low there by 0.6 GiB.)
* `RUNTIME_RESERVE_GIB + maxNumBatchedTokens x hidden size x ACTIVATION_BYTES_PER_TOKEN_UNIT`
  stands in for the profile run. vLLM measured 0.22 GiB of non-torch memory and, at 16384
  batched tokens, an activation peak of 1.72-1.78 GiB for Llama-3.1-8B (hidden 4096) and
  2.99-3.56 GiB for Llama-3.1-70B in fp8 (hidden 8192; the higher figure on a fresh
  torch.compile): 28 bytes per token per hidden unit covers the Llama shapes' worst (the MLP
  intermediate, 3.5 x hidden, in bf16 dominates), kept unsharded over tensor parallelism so
  the estimate errs high there. Models with a wider MLP use more (Qwen2.5-7B: 2.14 GiB at
  hidden 3584, 1.53 GiB by this rule). CUDA graphs (0.1-1.3 GiB) come out of the headroom
  above the utilization: vLLM 0.26.0 does not take them from the KV cache.
* Tensor and pipeline parallelism add communication buffers that PyTorch's allocator does not
  see; vLLM's profile counts them as non-torch memory, so they come out of the KV cache
  (`parallel_communication_reserve_gib`).
* Weights: parameters x bytes per weight; with fp8 (quantized on load) vLLM keeps the
  embeddings and the output head in 16 bits ("Model loading took 67.73 GiB" for Llama-3.1-70B,
  65.75 GiB at 8 bits throughout), so they count at 2 bytes where the architecture gives a
  vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.model_spec import Dtype, ModelArchitecture, Quantization

GIB = 1024**3
CUDA_UNREACHABLE_GIB = 0.82
RUNTIME_RESERVE_GIB = 0.3
ACTIVATION_BYTES_PER_TOKEN_UNIT = 28
# One NCCL communicator's buffers per GPU once it has run an all-reduce: 0.82 GiB measured on
# 2 x H200 (NCCL 2.28.9 under PyTorch 2.11, NVLink multicast off, 2026-11-25; see
# docs/planner.md). vLLM 0.32 runs one (pynccl) per tensor- and per pipeline-parallel group.
NCCL_COMMUNICATOR_GIB = 0.82
# vLLM's custom all-reduce (custom_all_reduce.py): an 8 MiB IPC buffer, an 8 MiB buffer plus
# its sync metadata, and 8 MiB of rank data per GPU; the peers' buffers are mapped, not copied.
CUSTOM_ALLREDUCE_BUFFERS_GIB = 24 * 1024**2 / GIB
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


def embedding_parameters(arch: ModelArchitecture) -> float:
    """The input embeddings and the output head (one matrix when tied); 0 when unknown."""
    if arch.vocab_size is None:
        return 0.0
    matrices = 1 if arch.tie_word_embeddings else 2
    return float(matrices * arch.vocab_size * arch.num_attention_heads * arch.head_dim)


def weights_gib(arch: ModelArchitecture, dtype: Dtype, quantization: Quantization) -> float:
    total = arch.parameters_billions * 1e9 * bytes_per_weight(dtype, quantization)
    if quantization == "fp8":
        # vLLM's online fp8 quantizes the linear layers only: the embeddings and the output
        # head stay in the 16-bit activation dtype.
        embeddings = embedding_parameters(arch)
        total += embeddings * (_DTYPE_BYTES[dtype] - bytes_per_weight(dtype, quantization))
    return total / GIB


def usable_gib(memory_gib: float) -> float:
    """What CUDA reports of a GPU of `memory_gib` (datasheet) GiB."""
    return max(0.0, memory_gib - CUDA_UNREACHABLE_GIB)


def budget_gib(memory_gib: float, gpu_memory_utilization: float) -> float:
    """What vLLM may use of one GPU."""
    return round_down(usable_gib(memory_gib) * gpu_memory_utilization)


def memory_for_budget(needed_gib: float, gpu_memory_utilization: float) -> float:
    """The datasheet memory (GiB) of a GPU that gives vLLM `needed_gib`."""
    return needed_gib / gpu_memory_utilization + CUDA_UNREACHABLE_GIB


def batched_tokens_within(arch: ModelArchitecture, reserve_gib: float) -> int:
    """The most max-num-batched-tokens whose runtime reserve stays within `reserve_gib`."""
    hidden_units = arch.num_attention_heads * arch.head_dim
    room = (reserve_gib - RUNTIME_RESERVE_GIB) * GIB
    return max(0, int(room // (hidden_units * ACTIVATION_BYTES_PER_TOKEN_UNIT)))


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


def parallel_communication_reserve_gib(
    tensor_parallel_size: int, pipeline_parallel_size: int = 1
) -> float:
    """What each GPU of a tensor- or pipeline-parallel replica gives to communication buffers:
    an NCCL communicator per parallel group, and the custom all-reduce's buffers with TP."""
    reserve = 0.0
    if tensor_parallel_size > 1:
        reserve += NCCL_COMMUNICATOR_GIB + CUSTOM_ALLREDUCE_BUFFERS_GIB
    if pipeline_parallel_size > 1:
        reserve += NCCL_COMMUNICATOR_GIB
    return reserve


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
    lora_gib: float = 0.0  # vLLM's LoRA buffers, allocated with the weights

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
    lora_gib: float = 0.0,
) -> GpuFit:
    """One GPU of a replica of `tensor_parallel_size` x `pipeline_parallel_size` GPUs: its shard
    of its stage's layers (the deepest stage: the one that fills first), and `lora_gib` of LoRA
    buffers."""
    budget = budget_gib(memory_gib, gpu_memory_utilization)
    stage_share = layers_per_stage(arch, pipeline_parallel_size) / arch.num_layers
    weights = round_up(weights_gib(arch, dtype, quantization) * stage_share / tensor_parallel_size)
    reserve = round_up(
        runtime_reserve_gib(arch, max_num_batched_tokens)
        + parallel_communication_reserve_gib(tensor_parallel_size, pipeline_parallel_size)
    )
    kv_cache = round_down(budget - weights - reserve - lora_gib)
    per_token = kv_bytes_per_token_per_gpu(
        arch, dtype, tensor_parallel_size, pipeline_parallel_size
    )
    tokens = kv_tokens_in(kv_cache, per_token)
    return GpuFit(tensor_parallel_size, budget, weights, reserve, kv_cache, tokens, lora_gib)
