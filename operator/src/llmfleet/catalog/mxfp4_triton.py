"""How vLLM's TRITON MXFP4 backend holds gpt-oss's experts on Hopper and what its MoE step
allocates, read from vLLM 0.26.0 (what ran on the GPUs) and the pinned 0.32.

Backend: select_mxfp4_moe_backend (fused_moe/oracle/mxfp4.py) tries, for gpt-oss, FlashInfer
TRT-LLM (Blackwell only), AITER (ROCm), then TRITON, which runs on sm90 wherever triton_kernels
imports: vLLM's CUDA wheel ships it (vllm/third_party/triton_kernels). Expert parallelism, data
parallelism or all2all kernels would move it to another backend; the planner plans none of them.

Weights, per GPU and MoE layer (convert_gpt_oss_weight_to_mxfp4_moe_kernel_format):
* mxfp4_round_up_hidden_size_and_intermediate_size leaves the hidden size and rounds each GPU's
  intermediate share up to INTERMEDIATE_TILE.
* _swizzle_mxfp4 (quantization/utils/mxfp4_utils.py) converts each expert matrix's packed e2m1
  values to triton_kernels' HopperMXValueLayout, which pads (outputs, input bytes) to
  (VALUE_ROWS, VALUE_BYTES), and its e8m0 scales to HopperMXScaleLayout, after padding the scale
  groups to a multiple of SCALE_GROUPS on sm90; the scale layout pads the outputs to SCALE_ROWS
  (2 x num_warps 8 x 2 x 8). The checkpoint-shaped tensors are freed.
* The experts' biases are held in fp32 (the TRITON branch's `.to(torch.float32)`).

The MoE step (experts/gpt_oss_triton_kernels_moe.py, triton_kernel_fused_experts; triton_kernels
matmul_ogs): the gate/up matmul writes its SwiGLU output into a bf16 [tokens x top_k, share]
intermediate cache; the down matmul scatters top_k rows per token, which matmul_ogs cannot fuse
(can_use_fused_scatter needs one expert per token), so it writes a bf16 [tokens x top_k, hidden]
scratchpad before reducing it into the [tokens, hidden] output. Both are live at once.
"""

from __future__ import annotations

import math

INTERMEDIATE_TILE = 64
VALUE_ROWS = 16  # k_tile x warp_tile x threads x scott_trick x contig: 1 x 2 x 4 x 2 x 1
VALUE_BYTES = 32  # the same along the input bytes for mma v3: 4 x 2 x 4 x 1 x 1
SCALE_ROWS = 256
SCALE_GROUPS = 4
MX_BLOCK = 32  # inputs per e8m0 scale
_FP32 = 4
_BF16 = 2


def _up(value: int, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def intermediate_share(width: int, tensor_parallel_size: int) -> int:
    """One GPU's share of the experts' intermediate size as the backend pads it."""
    return _up(width // tensor_parallel_size, INTERMEDIATE_TILE)


def matrix_bytes(outputs: int, inputs: int) -> int:
    """One expert's outputs x inputs matrix as swizzled: packed values (two a byte) and scales."""
    values = _up(outputs, VALUE_ROWS) * _up(inputs // 2, VALUE_BYTES)
    groups = _up(_up(inputs // MX_BLOCK, SCALE_GROUPS), 2)
    return values + _up(outputs, SCALE_ROWS) * groups


def layer_bytes(
    experts: int, hidden: int, width: int, tensor_parallel_size: int, biases: bool
) -> int:
    """One MoE layer's experts on one GPU: gate/up (2 x share outputs) and down projections, and
    their fp32 biases."""
    share = intermediate_share(width, tensor_parallel_size)
    matrices = matrix_bytes(2 * share, hidden) + matrix_bytes(hidden, share)
    bias = (2 * share + hidden) * _FP32 if biases else 0
    return experts * (matrices + bias)


def moe_step_bytes_per_token(
    hidden: int, width: int, experts_per_token: int, tensor_parallel_size: int
) -> int:
    """The MoE step's own buffers per batched token on one GPU: the intermediate cache and the
    down matmul's scatter scratchpad (the output counts with the hidden state)."""
    share = intermediate_share(width, tensor_parallel_size)
    return _BF16 * experts_per_token * (share + hidden)
