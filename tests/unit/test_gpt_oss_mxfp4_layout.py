"""gpt-oss's MXFP4 experts as vLLM's TRITON backend holds and runs them on Hopper (vLLM 0.26.0,
catalog/mxfp4_triton.py): each term against a hand computation from the source's shapes.

Source shapes, per expert on one GPU with share = round_up(intermediate / TP, 64):
  w13 values uint8 [2 x share, hidden / 2], scales [2 x share, hidden / 32]
  w2  values uint8 [hidden, share / 2],     scales [hidden, share / 32]
  HopperMXValueLayout pads (rows, bytes) to (16, 32); _swizzle_mxfp4 pads the scale groups to
  0 mod 4 on sm90, HopperMXScaleLayout the rows to 256; biases [2 x share] and [hidden] in fp32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmfleet.catalog.hfconfig import architecture_from_config, checkpoint_weights
from llmfleet.catalog.mxfp4_triton import matrix_bytes, moe_step_bytes_per_token
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner.memory import fit_on_gpu, weights_gib
from llmfleet.planner.weights import Weights, resolve_weights

CONFIGS = Path(__file__).parent / "data" / "hf-configs"
GIB = 1024**3
H200_CUDA_GIB = 139.8
# OAIAttention's fp32 YaRN cos/sin cache: 4096 x 32 positions x 64 (head_dim) x 4 bytes.
ROPE_CACHE = 4096 * 32 * 64 * 4


def config(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return loaded


def checkpoint(name: str) -> Weights:
    """The weights of `name`'s config.json, as a plan resolves them."""
    spec = LLMDeploymentSpec.model_validate(
        {"model": {"name": name.replace("--", "/")}, "gpus": {"count": 1, "profile": "h200-141gb"}}
    )
    return resolve_weights(spec, config(name), from_config=True)


@pytest.mark.parametrize(
    ("outputs", "inputs", "expected"),
    [
        # gpt-oss's shapes pad only the scale rows (to 256) and groups (90 -> 92).
        pytest.param(5760, 2880, 5760 * 1440 + 5888 * 92, id="20b-gate-up-tp1"),
        pytest.param(2880, 2880, 2880 * 1440 + 3072 * 92, id="20b-down-tp1"),
        pytest.param(2880, 1472, 2880 * 736 + 3072 * 48, id="20b-down-tp2-groups-46-to-48"),
        # Rows 100 -> 112 and 48 -> 64 bytes of values; 3 -> 4 groups, 100 -> 256 scale rows.
        pytest.param(100, 96, 112 * 64 + 256 * 4, id="value-layout-pads-rows-and-bytes"),
    ],
)
def test_an_expert_matrix_takes_its_swizzled_values_and_scales(
    outputs: int, inputs: int, expected: int
) -> None:
    assert matrix_bytes(outputs, inputs) == expected


@pytest.mark.parametrize(
    ("tensor_parallel_size", "per_expert"),
    [
        # w13 values + w13 scales + w2 values + w2 scales + fp32 biases
        pytest.param(
            1,
            5760 * 1440 + 5888 * 92 + 2880 * 1440 + 3072 * 92 + (5760 + 2880) * 4,
            id="tp1",
        ),
        pytest.param(
            2,
            2944 * 1440 + 3072 * 92 + 2880 * 736 + 3072 * 48 + (2944 + 2880) * 4,
            id="tp2-share-1440-to-1472",
        ),
        pytest.param(
            4,
            1536 * 1440 + 1536 * 92 + 2880 * 384 + 3072 * 24 + (1536 + 2880) * 4,
            id="tp4-share-720-to-768",
        ),
    ],
)
def test_gpt_oss_20b_weights_per_gpu_are_the_checkpoint_with_its_experts_as_vllm_holds_them(
    tensor_parallel_size: int, per_expert: int
) -> None:
    name = "openai--gpt-oss-20b"
    c = config(name)
    stored = checkpoint_weights(c)
    assert stored is not None
    layers, experts = c["num_hidden_layers"], c["num_local_experts"]
    bf16_biases = layers * experts * (2 * 2880 + 2880) * 2
    # Everything but the experts is split over the GPUs; each GPU holds its experts' share and
    # the rope cache.
    rest = stored.total_bytes - stored.routed_expert_bytes - bf16_biases
    expected = rest / tensor_parallel_size + layers * experts * per_expert + ROPE_CACHE

    weights = checkpoint(name)
    arch = architecture_from_config(c)
    held = weights_gib(arch, "auto", weights, tensor_parallel_size) / tensor_parallel_size

    assert held * GIB == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("tensor_parallel_size", "share", "batched", "reserve_gib"),
    [
        # 0.3 + batched x (2 x top_k 4 x (share + hidden 2880) + 7 x hidden) bytes, rounded up.
        pytest.param(1, 2880, 16384, 1.32, id="tp1-16k: 0.3 + 16384 x 66240 B"),
        pytest.param(1, 2880, 8192, 0.81, id="tp1-8k: 0.3 + 8192 x 66240 B"),
        pytest.param(2, 1472, 16384, 1.14, id="tp2-16k: 0.3 + 16384 x 54976 B"),
    ],
)
def test_the_reserve_holds_the_moe_steps_intermediate_cache_and_scatter_scratchpad(
    tensor_parallel_size: int, share: int, batched: int, reserve_gib: float
) -> None:
    name = "openai--gpt-oss-20b"
    c = config(name)
    weights = checkpoint(name)

    fit = fit_on_gpu(
        architecture_from_config(c),
        dtype="auto",
        quantization=weights,
        memory_gib=200,
        cuda_gib=H200_CUDA_GIB,
        gpu_memory_utilization=0.9,
        max_num_batched_tokens=batched,
        tensor_parallel_size=tensor_parallel_size,
    )

    assert moe_step_bytes_per_token(2880, 2880, 4, tensor_parallel_size) == 2 * 4 * (share + 2880)
    assert fit.reserve_gib == reserve_gib


@pytest.mark.parametrize(
    ("name", "triton"),
    [
        ("openai--gpt-oss-20b", True),  # MXFP4 experts: vLLM repacks them for TRITON
        ("openai--gpt-oss-120b", True),
        ("Qwen--Qwen3-30B-A3B", False),  # bf16 experts: the dense rule
    ],
)
def test_only_mxfp4_experts_are_sized_as_the_triton_backend_holds_them(
    name: str, triton: bool
) -> None:
    c = config(name)
    weights = checkpoint(name)
    stored = checkpoint_weights(c)

    assert weights.triton_experts == triton
    if stored is not None:
        assert (stored.allocated_bytes(1) != stored.total_bytes) == triton
