"""The activation peak vLLM's profile run finds per batched token, for an engine that compiles
afresh and for one that loads an earlier start's torch.compile cache (memory.py's docstring has
the measurements; docs/planner.md, "The compile cache and the KV cache")."""

from __future__ import annotations

from llmfleet.catalog import mxfp4_triton
from llmfleet.catalog.hfquant import Kernel
from llmfleet.models.model_spec import ModelArchitecture

GIB = 1024**3
RUNTIME_RESERVE_GIB = 0.3
MLP_BYTES_PER_UNIT = 6
RESIDUAL_BYTES_PER_UNIT = 7
# A w8a8 kernel's GEMM inputs (the MLP's gate/up input, hidden wide, and its down input,
# intermediate wide) are written in 1 byte, not 2, in the compiled forward that a start which
# loads its compile cache profiles.
W8A8_SAVED_BYTES_PER_UNIT = 1
# Llama's MLP width over its hidden size, assumed where intermediateSize is not given.
LLAMA_MLP_RATIO = 3.5


def activation_bytes_per_token(
    arch: ModelArchitecture, tensor_parallel_size: int = 1, triton_experts: bool = False
) -> float:
    """The profile run's activation peak per batched token on one GPU (see the module
    docstring): the MLP's intermediate is split over the tensor-parallel GPUs, the hidden
    state is whole on each. With `triton_experts` (MXFP4 experts on vLLM's TRITON backend) the
    MoE step's own buffers stand where a dense MLP's gate/up and activated outputs would: its
    SwiGLU is fused into the gate/up matmul, which writes top_k rows per token."""
    hidden = arch.hidden_size or arch.num_attention_heads * arch.head_dim
    if triton_experts and arch.num_experts_per_token:
        width = arch.expert_intermediate_size or arch.intermediate_size or hidden
        step = mxfp4_triton.moe_step_bytes_per_token(
            hidden, width, arch.num_experts_per_token, tensor_parallel_size
        )
        return step + RESIDUAL_BYTES_PER_UNIT * hidden
    mlp = arch.intermediate_size or hidden * LLAMA_MLP_RATIO
    return MLP_BYTES_PER_UNIT * mlp / tensor_parallel_size + RESIDUAL_BYTES_PER_UNIT * hidden


def compile_cached_activation_bytes_per_token(
    arch: ModelArchitecture,
    kernel: Kernel,
    tensor_parallel_size: int = 1,
    triton_experts: bool = False,
) -> float:
    """The activation peak per batched token of an engine that loads an earlier start's
    torch.compile cache: the 16-bit rule for every kernel but w8a8, whose quantized GEMM inputs
    take one byte less per hidden and per (tensor-parallel) intermediate unit."""
    full = activation_bytes_per_token(arch, tensor_parallel_size, triton_experts)
    if kernel != "w8a8":
        return full
    hidden = arch.hidden_size or arch.num_attention_heads * arch.head_dim
    mlp = arch.intermediate_size or hidden * LLAMA_MLP_RATIO
    return full - W8A8_SAVED_BYTES_PER_UNIT * (mlp / tensor_parallel_size + hidden)


def batched_tokens_within(
    arch: ModelArchitecture,
    reserve_gib: float,
    tensor_parallel_size: int = 1,
    triton_experts: bool = False,
) -> int:
    """The most max-num-batched-tokens whose runtime reserve stays within `reserve_gib`."""
    room = (reserve_gib - RUNTIME_RESERVE_GIB) * GIB
    per_token = activation_bytes_per_token(arch, tensor_parallel_size, triton_experts)
    return max(0, int(room // per_token))


def runtime_reserve_gib(
    arch: ModelArchitecture,
    max_num_batched_tokens: int,
    tensor_parallel_size: int = 1,
    compile_cached: Kernel | None = None,
    triton_experts: bool = False,
) -> float:
    """The runtime and the activation peak of an engine that compiles afresh, or, with
    `compile_cached` (the weights' kernel), of one that loads its compile cache."""
    per_token = (
        activation_bytes_per_token(arch, tensor_parallel_size, triton_experts)
        if compile_cached is None
        else compile_cached_activation_bytes_per_token(
            arch, compile_cached, tensor_parallel_size, triton_experts
        )
    )
    return RUNTIME_RESERVE_GIB + max_num_batched_tokens * per_token / GIB
