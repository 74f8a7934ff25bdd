"""The planner sizes sliding-window, mixture-of-experts and multi-latent-attention models by
vLLM's own accounting: its hybrid KV cache manager's blocks and groups, the experts a batch
touches, the latent every GPU holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.catalog.hfconfig import architecture_from_config
from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.models import ModelArchitecture
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.planner.kv_cache import kv_layout
from llmfleet.planner.memory import GIB
from llmfleet.planner.parallelism import tensor_parallel_sizes
from llmfleet.planner.performance import Gpu, pod_model
from llmfleet.planner.planning import plan

CONFIGS = Path(__file__).parent / "data" / "hf-configs"
_PROFILE = DEFAULT_GPU_PROFILES["h100-80gb"]
H100 = Gpu(
    _PROFILE.hbm_gbps,
    _PROFILE.bf16_tflops,
    _PROFILE.fp8_tflops,
    _PROFILE.interconnect_gbps,
)


def from_config(name: str) -> ModelArchitecture:
    return architecture_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def test_gemma3_kv_cache_is_counted_in_vllm_hybrid_blocks() -> None:
    layout = kv_layout(from_config("google--gemma-3-27b-it"), "auto", 1, 1, 8192)
    # 10 global and 52 local layers: groups of 10 layers, 1 global group and 6 local ones (the
    # last padded); a block is 16 tokens x 10 layers x 2 x 16 heads x 128 x 2 bytes = 1.25 MiB.
    assert layout.block_bytes == 1_310_720
    blocks = layout.blocks(20.0)
    assert blocks == 16_384  # 20 GiB / 1.25 MiB
    # The blocks the groups share: blocks // 7 groups x 16 tokens.
    assert layout.tokens(blocks) == 37_440
    # One 131072-token sequence: 8192 blocks in the global group, and in each local group the
    # window and two steps in flight (vLLM schedules asynchronously), ceil(min(1023 + 2 x 8192,
    # 131072) / 16) + 1 = 1089: 8192 + 6 x 1089 = 14726 blocks, so one fits in 20 GiB where 62
    # layers of full attention would need 62 GiB.
    assert layout.blocks_per_sequence(131_072) == 14_726
    assert layout.sequence_gib(131_072) == pytest.approx(14_726 * 1.25 / 1024)
    # vLLM's "GPU KV cache size" (kv_cache_size_tokens): 16384 / 14726 sequences x 131072.
    assert layout.tokens(blocks, 131_072) == 145_829


@pytest.mark.parametrize(
    ("max_model_len", "hybrid", "every_layer_global"),
    [
        # 2048 + 6 x 1089 = 8582 blocks a sequence of 32768; 40 GiB / (507904 B x 32768) = 2.6.
        pytest.param(32_768, 3, 2, id="32k"),
        # 8192 + 6534 = 14726 blocks; every layer global would need 62 GiB a sequence.
        pytest.param(131_072, 2, 0, id="128k"),
    ],
)
def test_sliding_window_layers_hold_more_long_sequences(
    max_model_len: int, hybrid: int, every_layer_global: int
) -> None:
    arch = from_config("google--gemma-3-27b-it")
    layout = kv_layout(arch, "auto", 1, 1, 8192)
    dense = kv_layout(arch.model_copy(update={"sliding_window": None}), "auto", 1, 1, 8192)

    assert layout.blocks(40.0) // layout.blocks_per_sequence(max_model_len) == hybrid
    assert int(40 * GIB) // (dense.bytes_per_token * max_model_len) == every_layer_global


def test_a_model_whose_every_layer_slides_holds_one_window_per_sequence() -> None:
    layout = kv_layout(from_config("mistralai--Mistral-7B-v0.1"), "auto", 1, 1, 2048)
    # One group of all 32 layers; ceil(min(4095 + 2 x 2048, 32768) / 16) + 1 = 513 blocks.
    assert (layout.full_groups, layout.sliding_groups) == (0, 1)
    assert layout.blocks_per_sequence(32_768) == 513


def test_the_catalog_gemma3_plans_a_128k_context_on_one_h100() -> None:
    spec = LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "google/gemma-3-27b-it"},
            "gpus": {"count": 1, "profile": "h100-80gb"},
            # 8192 batched tokens: at 16384 the activation reserve (2.85 GiB: its MLP is 4 x
            # hidden) leaves 0.6 GiB too little.
            "engine": {"maxModelLen": 131072, "maxNumBatchedTokens": 8192},
        }
    )
    # Every layer global, one sequence took 62 GiB of KV cache and did not fit.
    result = plan(spec)

    assert result.tensor_parallel_size == 1
    assert result.max_concurrent_sequences >= 1


def test_catalog_gemma3_entries_carry_their_sliding_window() -> None:
    for name, layers in [
        ("gemma-3-4b-it", 34),
        ("gemma-3-12b-it", 48),
        ("gemma-3-27b-it", 62),
    ]:
        arch = lookup_architecture(f"google/{name}")
        assert arch is not None
        assert arch.sliding_window == 1024
        assert arch.sliding_window_layers == layers - layers // 6


def test_mla_cache_is_not_sharded_over_tensor_parallel_gpus() -> None:
    arch = from_config("deepseek-ai--DeepSeek-V3")

    per_token = {tp: kv_layout(arch, "auto", tp).bytes_per_token for tp in (1, 2, 8)}
    assert set(per_token.values()) == {61 * 576 * 2}
    # MLA has no KV heads to split: any power of two dividing the 128 query heads (and each
    # expert's 2048-wide MLP) is allowed.
    assert tensor_parallel_sizes(arch, 8) == (1, 2, 4, 8)


def test_tensor_parallelism_must_split_each_experts_mlp() -> None:
    arch = from_config("Qwen--Qwen3-30B-A3B")  # experts 768 wide
    narrow = arch.model_copy(update={"expert_intermediate_size": 1_100})

    assert tensor_parallel_sizes(arch, 8) == (1, 2, 4, 8)
    # 1100 / 8 is not whole: vLLM cannot split each expert over 8 GPUs.
    assert tensor_parallel_sizes(narrow, 8) == (1, 2, 4)


def test_a_mixture_of_experts_decodes_faster_than_a_dense_model_of_its_size() -> None:
    moe = from_config("Qwen--Qwen3-30B-A3B")
    dense = moe.model_copy(
        update={
            "num_experts": None,
            "num_experts_per_token": None,
            "active_parameters_billions": None,
        }
    )

    def pod(arch: ModelArchitecture) -> float:
        model = pod_model(
            arch,
            dtype="auto",
            quantization="none",
            tensor_parallel_size=1,
            gpu=H100,
            max_num_batched_tokens=8192,
        )
        return model.itl_s(1, 1000, 200)

    # One token touches 8 of 128 experts: it reads the 1.5 GiB of shared weights and 1/16 of
    # the 54 GiB of experts, about 5 GiB instead of 57.
    assert pod(moe) < pod(dense) / 5


def test_a_large_batch_touches_every_expert() -> None:
    arch = from_config("mistralai--Mixtral-8x7B-v0.1")
    model = pod_model(
        arch,
        dtype="auto",
        quantization="none",
        tensor_parallel_size=2,
        gpu=H100,
        max_num_batched_tokens=8192,
    )
    # 1 - (1 - 2/8)^64 of the experts: all of them, to 8 decimal places.
    assert model._weight_bytes_read(64) == pytest.approx(model.weight_bytes_per_gpu, rel=1e-8)
    # One token: the shared weights and 2 of the 8 experts.
    shared = model.weight_bytes_per_gpu - model.expert_bytes_per_gpu
    assert model._weight_bytes_read(1) == pytest.approx(shared + model.expert_bytes_per_gpu / 4)


def base(**figures: object) -> dict[str, object]:
    return {
        "parametersBillions": 30,
        "numLayers": 48,
        "numAttentionHeads": 32,
        "numKeyValueHeads": 4,
        "headDim": 128,
        "maxPositionEmbeddings": 40960,
        **figures,
    }


@pytest.mark.parametrize(
    ("figures", "field"),
    [
        pytest.param({"slidingWindowLayers": 40}, "slidingWindow", id="layers-without-window"),
        pytest.param(
            {"slidingWindow": 1024, "slidingWindowLayers": 49},
            "numLayers",
            id="more-than-layers",
        ),
        pytest.param({"numExperts": 128}, "activeParametersBillions", id="experts-alone"),
        pytest.param(
            {"numExperts": 8, "numExpertsPerToken": 8, "activeParametersBillions": 3},
            "numExpertsPerToken must be less",
            id="every-expert-per-token",
        ),
        pytest.param(
            {
                "numExperts": 128,
                "numExpertsPerToken": 8,
                "activeParametersBillions": 31,
            },
            "activeParametersBillions less than parametersBillions",
            id="active-above-total",
        ),
        pytest.param({"kvLoraRank": 512}, "qkRopeHeadDim", id="latent-without-rope"),
    ],
)
def test_inconsistent_family_figures_are_refused_naming_the_fields(
    figures: dict[str, object], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        ModelArchitecture.model_validate(base(**figures))
