"""gpt-oss planned from its own config.json: MXFP4 experts sized against the bytes the
checkpoint holds and as vLLM pads them, the alternating sliding-window layers in the KV cache,
the weight-only kernel's speed, and what `llmfleet plan` says of the format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llmfleet.catalog.hfconfig import architecture_from_config, checkpoint_weights
from llmfleet.cli import main
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.planner.efficiencies import CALIBRATED
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_gpu
from llmfleet.planner.memory import weights_gib
from llmfleet.planner.performance import Gpu, pod_model
from llmfleet.planner.weights import resolve_weights

CONFIGS = Path(__file__).parent / "data" / "hf-configs"
GIB = 1024**3


def config(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return loaded


def spec(name: str, profile: str = "h100-80gb", count: int = 1, **engine: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": name.replace("--", "/")},
            "gpus": {"count": count, "profile": profile},
            "engine": engine,
        }
    )


def gpt_oss_safetensors(c: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """The checkpoint's tensors as OpenAI's gpt-oss export writes them (name, bytes): experts'
    `*_blocks` uint8 [E, out, in/32, 16] (two e2m1 values a byte), `*_scales` uint8 (e8m0)
    [E, out, in/32], `*_bias` bf16; everything else bf16. The Hub is not reachable from here, so
    this tensor list, worked out from config.json, is the byte count the planner is held to."""
    hidden, width = c["hidden_size"], c["intermediate_size"]
    experts, heads, kv = c["num_local_experts"], c["num_attention_heads"], c["num_key_value_heads"]
    head = c["head_dim"]
    bf16 = 2
    yield "model.embed_tokens.weight", c["vocab_size"] * hidden * bf16
    yield "lm_head.weight", c["vocab_size"] * hidden * bf16
    yield "model.norm.weight", hidden * bf16
    for i in range(c["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        for name, inputs, outputs in [
            ("self_attn.q_proj", hidden, heads * head),
            ("self_attn.k_proj", hidden, kv * head),
            ("self_attn.v_proj", hidden, kv * head),
            ("self_attn.o_proj", heads * head, hidden),
            ("mlp.router", hidden, experts),
        ]:
            yield f"{layer}.{name}.weight", inputs * outputs * bf16
            yield f"{layer}.{name}.bias", outputs * bf16
        yield f"{layer}.self_attn.sinks", heads * bf16
        yield f"{layer}.input_layernorm.weight", hidden * bf16
        yield f"{layer}.post_attention_layernorm.weight", hidden * bf16
        for name, inputs, outputs in [
            ("mlp.experts.gate_up_proj", hidden, 2 * width),
            ("mlp.experts.down_proj", width, hidden),
        ]:
            yield f"{layer}.{name}_blocks", experts * outputs * (inputs // 32) * 16
            yield f"{layer}.{name}_scales", experts * outputs * (inputs // 32)
            yield f"{layer}.{name}_bias", experts * outputs * bf16


@pytest.mark.parametrize(
    ("name", "published_billions"),
    [
        # OpenAI's model card: 20.91B and 116.83B parameters.
        pytest.param("openai--gpt-oss-20b", 20.91, id="20b"),
        pytest.param("openai--gpt-oss-120b", 116.83, id="120b"),
    ],
)
def test_gpt_oss_is_sized_within_2_percent_of_its_mxfp4_checkpoint(
    name: str, published_billions: float
) -> None:
    c = config(name)
    held = sum(size for _, size in gpt_oss_safetensors(c))

    weights = checkpoint_weights(c)
    planned = plan(spec(name, "h200-141gb"), model_config=c)

    assert architecture_from_config(c).parameters_billions == pytest.approx(
        published_billions, rel=0.01
    )
    assert weights is not None
    assert weights.format.kernel == "w4a16"
    assert weights.total_bytes == pytest.approx(held, rel=0.02)
    assert planned.weights_gib == pytest.approx(held / GIB, rel=0.02)
    # About a quarter of the 16-bit figure: the experts are nearly all of it.
    assert planned.weights_gib < 0.35 * weights_gib(architecture_from_config(c), "auto", "none")


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        pytest.param("openai--gpt-oss-20b", "h100-80gb", id="20b-h100"),
        pytest.param("openai--gpt-oss-120b", "h100-80gb", id="120b-h100"),
        pytest.param("openai--gpt-oss-120b", "h200-141gb", id="120b-h200"),
    ],
)
def test_gpt_oss_fits_one_gpu_and_its_windowed_layers_hold_only_the_window_of_a_long_sequence(
    name: str, profile: str
) -> None:
    c = config(name)
    arch = architecture_from_config(c)

    planned = plan(spec(name, profile, maxModelLen=131_072), model_config=c)

    # OpenAI sized both to one 80 GB GPU in MXFP4; 16-bit 120b would take four.
    assert (planned.tensor_parallel_size, planned.gpus_per_replica) == (1, 1)
    assert planned.weights_gib_per_gpu == pytest.approx(planned.weights_gib, rel=0.01)
    every_layer = kv_bytes_per_token_per_gpu(arch, "auto", 1)
    as_full_attention = planned.kv_cache_gib_per_gpu * GIB / every_layer
    # Half the layers are windowed to 128 tokens: a 128k-token sequence takes the full layers'
    # share and, in the windowed ones, the window and the tokens of the steps in flight (2 x
    # 16384), so the cache holds 1.6 times what every layer attending to every token would.
    assert 1.5 * as_full_attention < planned.kv_cache_tokens_per_replica < 2 * as_full_attention


# An H100 SXM's datasheet figures.
H100 = Gpu(hbm_gbps=3350, bf16_tflops=989, fp8_tflops=1979, interconnect_gbps=450)


def test_mxfp4_experts_decode_at_their_bytes_and_batch_at_the_bf16_rate() -> None:
    c = config("openai--gpt-oss-20b")
    weights = resolve_weights(spec("openai--gpt-oss-20b"), c, from_config=True)
    arch = architecture_from_config(c)
    pod: dict[str, Any] = {"tensor_parallel_size": 1, "gpu": H100, "max_num_batched_tokens": 8192}
    mxfp4 = pod_model(arch, dtype="auto", quantization=weights, **pod)
    sixteen = pod_model(arch, dtype="auto", quantization="none", **pod)
    # The bytes alone: the TRITON MoE layer's fixed cost (test_mxfp4_moe_step.py) aside.
    mxfp4_bytes = pod_model(
        arch,
        dtype="auto",
        quantization=weights,
        efficiencies=replace(CALIBRATED, mxfp4_layer_overhead_us=0.0),
        **pod,
    )

    bytes_ratio = weights_gib(arch, "auto", weights) / weights_gib(arch, "auto", "none")

    # Weight-only 4-bit experts (triton matmul_ogs or Marlin dequantize them to 16 bits): one
    # sequence reads fewer bytes, so it decodes faster, though by less than the bytes (the
    # packed experts read at the weight-only kernels' lower efficiency, the bf16 attention and
    # embeddings at the 16-bit rate); a large batch multiplies at the bf16 rate.
    alone = mxfp4_bytes.itl_s(1, 1000, 500) / sixteen.itl_s(1, 1000, 500)
    assert bytes_ratio < alone < 0.9
    assert mxfp4.step_s(0, 0, 8192, 1000) == pytest.approx(
        sixteen.step_s(0, 0, 8192, 1000), rel=0.02
    )


def test_llmfleet_plan_says_the_mxfp4_format_came_from_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "gpt-oss.yaml"
    manifest.write_text(
        "apiVersion: llmfleet.dev/v1alpha1\nkind: LLMDeployment\nmetadata: {name: gpt-oss}\n"
        "spec:\n  model: {name: openai/gpt-oss-20b}\n  gpus: {count: 1, profile: h100-80gb}\n"
    )
    given = str(CONFIGS / "openai--gpt-oss-20b.json")

    assert main(["plan", "-f", str(manifest), "--model-config", given]) == 0
    out = " ".join(capsys.readouterr().out.split())

    assert (
        "Weights: MXFP4 experts: 4-bit e2m1 weights, one e8m0 scale per 32 inputs; attention, "
        "router, embeddings and lm_head 16-bit, from the quantization_config of config.json of "
        "openai/gpt-oss-20b@main." in out
    )
    assert "12.9 GiB of MXFP4 weights" in out
    assert "--quantization" not in out


@pytest.mark.parametrize(
    ("model", "says_uncalibrated"),
    [
        # MXFP4 experts: saturation off by 36-46 %, steps above batch 8 spread up to 2.9x.
        ("openai/gpt-oss-20b", True),
        ("openai/gpt-oss-120b", True),
        ("Qwen/Qwen3-30B-A3B", False),  # a bf16 mixture of experts
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", False),  # w4a16 on every linear layer (calibrated)
    ],
)
def test_llmfleet_plan_says_when_its_speed_prediction_is_not_calibrated(
    model: str, says_uncalibrated: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "model.yaml"
    manifest.write_text(
        "apiVersion: llmfleet.dev/v1alpha1\nkind: LLMDeployment\nmetadata: {name: m}\n"
        f"spec:\n  model: {{name: {model}}}\n  gpus: {{count: 1, profile: h200-141gb}}\n"
    )
    given = str(CONFIGS / f"{model.replace('/', '--')}.json")

    assert main(["plan", "-f", str(manifest), "--model-config", given]) == 0
    out = " ".join(capsys.readouterr().out.split())
    predicted = plan(
        spec(model.replace("/", "--"), "h200-141gb"), model_config=config(model.replace("/", "--"))
    ).predicted

    assert ("Speed: not calibrated for MXFP4 experts" in out) == says_uncalibrated
    assert predicted is not None
    assert predicted.calibration.startswith("not calibrated") == says_uncalibrated
