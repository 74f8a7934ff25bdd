"""Model families read from real config.json files (tests/unit/data/hf-configs/): parameter
counts against the published ones, and the weights and KV cache the planner sizes them by,
against figures worked out by hand from the same files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmfleet.catalog.hfconfig import (
    ModelConfigError,
    architecture_from_config,
    checkpoint_weights,
)
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_gpu
from llmfleet.planner.memory import weights_gib

CONFIGS = Path(__file__).parent / "data" / "hf-configs"


def from_config(name: str) -> ModelArchitecture:
    return architecture_from_config(json.loads((CONFIGS / f"{name}.json").read_text()))


@pytest.mark.parametrize(
    ("name", "published_total", "published_active"),
    [
        pytest.param("meta-llama--Meta-Llama-3.1-8B", 8.03, None, id="llama-dense"),
        pytest.param("Qwen--Qwen2.5-7B-Instruct", 7.61, None, id="qwen2-attention-bias"),
        pytest.param("Qwen--Qwen3-8B", 8.19, None, id="qwen3-qk-norm"),
        pytest.param("mistralai--Mistral-7B-v0.1", 7.24, None, id="mistral-sliding-window"),
        pytest.param("google--gemma-2-9b", 9.24, None, id="gemma2-alternating"),
        pytest.param("google--gemma-3-1b-it", 1.0, None, id="gemma3-text-only"),
        pytest.param("google--gemma-3-27b-it", 27.4, None, id="gemma3-with-vision-tower"),
        pytest.param("mistralai--Mixtral-8x7B-v0.1", 46.7, 12.9, id="mixtral-8x7b"),
        pytest.param("mistralai--Mixtral-8x22B-v0.1", 141, 39, id="mixtral-8x22b"),
        pytest.param("Qwen--Qwen3-30B-A3B", 30.5, 3.3, id="qwen3-moe"),
        pytest.param("Qwen--Qwen3-235B-A22B", 235, 22, id="qwen3-moe-large"),
        pytest.param("deepseek-ai--DeepSeek-V3", 671, 37, id="deepseek-v3-mla-moe"),
    ],
)
def test_parameters_summed_from_the_config_match_the_published_counts(
    name: str, published_total: float, published_active: float | None
) -> None:
    arch = from_config(name)

    assert arch.parameters_billions == pytest.approx(published_total, rel=0.01)
    if published_active is None:
        assert arch.active_parameters_billions is None
    else:
        assert arch.active_parameters_billions == pytest.approx(published_active, rel=0.025)


@pytest.mark.parametrize(
    ("name", "tp", "kv_bytes", "weights"),
    [
        # 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes; 8.03e9 x 2 bytes.
        pytest.param("meta-llama--Meta-Llama-3.1-8B", 1, 131_072, 14.96, id="llama"),
        # Every layer holds a token in vLLM's unit of account: 62 x 2 x 16 x 128 x 2 bytes;
        # 27.43e9 parameters (vision tower included) x 2 bytes.
        pytest.param("google--gemma-3-27b-it", 1, 507_904, 51.09, id="gemma3"),
        # 42 x 2 x 8 x 256 x 2 bytes; 9.24e9 x 2 bytes.
        pytest.param("google--gemma-2-9b", 1, 344_064, 17.21, id="gemma2"),
        # 48 x 2 x (4 KV heads / TP 2) x 128 x 2 bytes; all 128 experts' weights: 30.53e9 x 2.
        pytest.param("Qwen--Qwen3-30B-A3B", 2, 49_152, 56.87, id="qwen3-moe-tp2"),
        # 56 x 2 x 8 x 128 x 2 bytes; 140.6e9 x 2 bytes.
        pytest.param("mistralai--Mixtral-8x22B-v0.1", 1, 229_376, 261.92, id="mixtral"),
        # Multi-latent attention: 61 layers x (512 latent + 64 rotary) x 2 bytes, and every GPU
        # of TP 8 holds all of it. The checkpoint is fp8 (its quantization_config): 1 byte per
        # linear-layer weight plus an fp32 scale per 128x128 block, the embeddings, output
        # head, norms and routers in bf16 -- not the 1,249.88 GiB of 671.0e9 x 2 bytes.
        pytest.param("deepseek-ai--DeepSeek-V3", 8, 70_272, 626.92, id="deepseek-mla-fp8-tp8"),
        # 24 x 2 x 8 x 64 x 2 bytes (the sinks are one logit per head, no cache). The experts are
        # MXFP4 (4.25 bits a weight with their e8m0 scales), everything else bf16.
        pytest.param("openai--gpt-oss-20b", 1, 49_152, 12.82, id="gpt-oss-mxfp4"),
    ],
)
def test_kv_cache_per_token_and_weights_follow_the_config(
    name: str, tp: int, kv_bytes: int, weights: float
) -> None:
    arch = from_config(name)

    checkpoint = checkpoint_weights(json.loads((CONFIGS / f"{name}.json").read_text()))

    assert kv_bytes_per_token_per_gpu(arch, "auto", tp) == kv_bytes
    if checkpoint is None:
        assert weights_gib(arch, "auto", "none") == pytest.approx(weights, abs=0.01)
    else:
        assert checkpoint.total_bytes / 1024**3 == pytest.approx(weights, abs=0.01)


@pytest.mark.parametrize(
    ("name", "window", "sliding"),
    [
        pytest.param("google--gemma-2-9b", 4096, 21, id="gemma2-every-other-layer"),
        # 26 layers, every 6th global: 26 - 4.
        pytest.param("google--gemma-3-1b-it", 512, 22, id="gemma3-five-of-six"),
        pytest.param("google--gemma-3-27b-it", 1024, 52, id="gemma3-text-config"),
        # vLLM windows the even-numbered layers: 12 of 24, 18 of 36.
        pytest.param("openai--gpt-oss-20b", 128, 12, id="gpt-oss-every-other-layer"),
        pytest.param("openai--gpt-oss-120b", 128, 18, id="gpt-oss-120b"),
        # Unset slidingWindowLayers: every layer.
        pytest.param("mistralai--Mistral-7B-v0.1", 4096, None, id="mistral-all-layers"),
    ],
)
def test_sliding_window_layers_are_read_from_the_config(
    name: str, window: int, sliding: int | None
) -> None:
    arch = from_config(name)

    assert (arch.sliding_window, arch.sliding_window_layers) == (window, sliding)


def test_a_qwen_config_whose_sliding_window_is_off_plans_as_full_attention() -> None:
    # Qwen2.5's config.json carries sliding_window 131072 with use_sliding_window false.
    assert from_config("Qwen--Qwen2.5-7B-Instruct").sliding_window is None


@pytest.mark.parametrize(
    ("name", "architecture", "what"),
    [
        pytest.param(
            "meta-llama--Llama-4-Scout-17B-16E-Instruct",
            "Llama4ForConditionalGeneration",
            "chunked local attention",
            id="llama4",
        ),
        pytest.param(
            "Qwen--Qwen3.5-27B",
            "Qwen3_5ForConditionalGeneration",
            "linear-attention",
            id="qwen35",
        ),
        pytest.param(
            "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
            "NemotronHForCausalLM",
            "Mamba",
            id="mamba",
        ),
        pytest.param(
            "deepseek-ai--DeepSeek-V3.2",
            "DeepseekV32ForCausalLM",
            "indexer",
            id="sparse-attention",
        ),
    ],
)
def test_unmodelled_families_are_refused_naming_the_architecture_and_what_is_missing(
    name: str, architecture: str, what: str
) -> None:
    with pytest.raises(ModelConfigError) as refused:
        from_config(name)

    message = str(refused.value)
    assert architecture in message
    assert what in message
    assert "spec.model.architecture" in message
    assert "Gemma3ForConditionalGeneration" in message  # the modelled ones are listed


def test_an_unknown_architecture_is_refused_with_what_is_modelled() -> None:
    with pytest.raises(ModelConfigError, match="FalconForCausalLM models are not modelled"):
        architecture_from_config({"architectures": ["FalconForCausalLM"]})


def test_kimi_k2_plans_as_the_deepseek_v3_layout_it_shares() -> None:
    arch = from_config("moonshotai--Kimi-K2-Instruct")

    # Published: 1.04T total, 32B active.
    assert arch.parameters_billions == pytest.approx(1040, rel=0.02)
    assert arch.active_parameters_billions == pytest.approx(32, rel=0.03)
    assert (arch.kv_lora_rank, arch.qk_rope_head_dim) == (512, 64)
