"""Each quantization_config vLLM serves, read into the format, kernel and spec value the planner
plans by, and the modules a config leaves unquantized counted at 16 bits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmfleet.catalog.hfconfig import architecture_from_config, checkpoint_weights
from llmfleet.catalog.hfquant import quant_format

QWEN = json.loads(
    (Path(__file__).parent / "data/hf-configs/Qwen--Qwen2.5-7B-Instruct.json").read_text()
)
LAYERS = QWEN["num_hidden_layers"]
HIDDEN, INTER = QWEN["hidden_size"], QWEN["intermediate_size"]


def scheme(weights: dict[str, Any], activations: dict[str, Any] | None) -> dict[str, Any]:
    """A compressed-tensors quantization_config with one config group, as llm-compressor
    writes it."""
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized" if weights.get("num_bits") == 4 else "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"symmetric": True, "dynamic": False, **weights},
                "input_activations": activations,
            }
        },
        "ignore": ["lm_head"],
    }


FP8_DYNAMIC = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}


@pytest.mark.parametrize(
    ("quantization_config", "description", "kernel", "spec_value"),
    [
        pytest.param(
            {"quant_method": "fp8", "activation_scheme": "dynamic"},
            "fp8 weights, one scale per tensor",
            "w8a8",
            "fp8",
            id="fp8-per-tensor",
        ),
        pytest.param(
            {"quant_method": "fp8", "weight_block_size": [128, 128]},
            "fp8 weights, one scale per 128x128 block",
            "w8a8",
            "fp8",
            id="fp8-block",
        ),
        pytest.param(
            scheme({"num_bits": 8, "type": "float", "strategy": "channel"}, FP8_DYNAMIC),
            "fp8 W8A8, one scale per output channel",
            "w8a8",
            "fp8",
            id="compressed-tensors-fp8-dynamic",
        ),
        pytest.param(
            scheme(
                {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "block",
                    "block_structure": [128, 128],
                },
                FP8_DYNAMIC,
            ),
            "fp8 W8A8, one scale per 128x128 block",
            "w8a8",
            "fp8",
            id="compressed-tensors-fp8-block",
        ),
        pytest.param(
            {
                **scheme(
                    {"num_bits": 8, "type": "int", "strategy": "channel"},
                    {**FP8_DYNAMIC, "type": "int"},
                ),
                "format": "int-quantized",
            },
            "int8 W8A8, one scale per output channel",
            "w8a8",
            "int8",
            id="compressed-tensors-int8-w8a8",
        ),
        pytest.param(
            scheme({"num_bits": 8, "type": "float", "strategy": "channel"}, None),
            "fp8 W8A16, one scale per output channel",
            "w8a16",
            "fp8",
            id="compressed-tensors-fp8-weight-only",
        ),
        pytest.param(
            scheme({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}, None),
            "4-bit int weights packed in int32, one 16-bit scale per 128 inputs",
            "w4a16",
            None,
            id="compressed-tensors-w4a16",
        ),
        pytest.param(
            {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True},
            "4-bit AWQ weights, one 16-bit scale and zero point per 64 inputs",
            "w4a16",
            "awq",
            id="awq-group-64",
        ),
        pytest.param(
            {"quant_method": "gptq", "bits": 8, "group_size": -1, "desc_act": True, "sym": True},
            "8-bit GPTQ weights, one 16-bit scale and zero point per output channel",
            "w8a16",
            "gptq",
            id="gptq-8-bit-per-channel",
        ),
    ],
)
def test_each_format_vllm_serves_is_read_with_the_kernel_it_runs(
    quantization_config: dict[str, Any], description: str, kernel: str, spec_value: str | None
) -> None:
    found = quant_format({**QWEN, "quantization_config": quantization_config})

    assert found is not None
    assert (found.description, found.kernel, found.spec_value) == (description, kernel, spec_value)


def test_a_16_bit_checkpoint_has_no_format() -> None:
    assert quant_format(QWEN) is None
    assert checkpoint_weights(QWEN) is None


def sized(quantization_config: dict[str, Any]) -> float:
    weights = checkpoint_weights({**QWEN, "quantization_config": quantization_config})
    assert weights is not None
    return weights.total_bytes


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
# Every layer's down_proj (INTER inputs, HIDDEN outputs) at 16 bits, and as AWQ stores it: packed
# 4-bit weights plus a 16-bit scale and a 4-bit zero point per 128 inputs (GPTQ adds an int32
# g_idx per input).
DOWN_16_BIT = LAYERS * INTER * HIDDEN * 2
DOWN_AWQ = LAYERS * (INTER * HIDDEN / 2 + INTER // 128 * HIDDEN * (2 + 0.5))
DOWN_GPTQ = DOWN_AWQ + LAYERS * INTER * 4
VOCAB = QWEN["vocab_size"]


@pytest.mark.parametrize(
    ("base", "quantization_config", "more_bytes"),
    [
        pytest.param(
            AWQ,
            {**AWQ, "modules_to_not_convert": ["down_proj"]},
            DOWN_16_BIT - DOWN_AWQ,
            id="awq-modules-to-not-convert-by-substring",
        ),
        pytest.param(
            GPTQ,
            {
                **GPTQ,
                # As AutoGPTQ writes it: one list per sequential step, down_proj left out.
                "modules_in_block_to_quantize": [
                    ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                    ["self_attn.o_proj"],
                    ["mlp.gate_proj", "mlp.up_proj"],
                ],
            },
            DOWN_16_BIT - DOWN_GPTQ,
            id="gptq-only-the-modules-in-block-to-quantize",
        ),
        pytest.param(
            AWQ,
            {**AWQ, "lm_head": True},
            # The output head quantized too: a saving of its 16-bit bytes less its AWQ bytes.
            -(VOCAB * HIDDEN * 2 - (HIDDEN * VOCAB / 2 + HIDDEN // 128 * VOCAB * 2.5)),
            id="awq-lm-head-quantized",
        ),
    ],
)
def test_modules_a_config_leaves_unquantized_count_at_16_bits(
    base: dict[str, Any], quantization_config: dict[str, Any], more_bytes: float
) -> None:
    assert sized(quantization_config) - sized(base) == pytest.approx(more_bytes)


@pytest.mark.parametrize(
    "ignore",
    [
        pytest.param([f"model.layers.{i}.mlp.down_proj" for i in range(LAYERS)], id="exact"),
        pytest.param(["re:.*down_proj$"], id="regex"),
    ],
)
def test_compressed_tensors_ignore_names_modules_exactly_or_by_pattern(ignore: list[str]) -> None:
    base = scheme({"num_bits": 8, "type": "float", "strategy": "tensor"}, FP8_DYNAMIC)
    with_ignore = {**base, "ignore": ["lm_head", *ignore]}

    # down_proj at 16 bits instead of 8 (and without its fp32 scale).
    assert sized(with_ignore) - sized(base) == pytest.approx(LAYERS * (INTER * HIDDEN - 4))


FAMILIES = [
    "meta-llama--Meta-Llama-3.1-8B",
    "Qwen--Qwen3-30B-A3B",
    "mistralai--Mixtral-8x7B-v0.1",
    "google--gemma-3-27b-it",
    "deepseek-ai--DeepSeek-V3",
]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_sizes_as_16_bit_when_its_config_ignores_every_module(name: str) -> None:
    family = json.loads((Path(__file__).parent / f"data/hf-configs/{name}.json").read_text())
    family.pop("quantization_config", None)
    fp8 = scheme({"num_bits": 8, "type": "float", "strategy": "tensor"}, FP8_DYNAMIC)
    sixteen = checkpoint_weights({**family, "quantization_config": {**fp8, "ignore": ["re:.*"]}})
    eight = checkpoint_weights({**family, "quantization_config": {**fp8, "ignore": []}})
    assert sixteen is not None
    assert eight is not None

    # The linear layers summed from the config are the model's own: unquantized, they and the
    # rest make its 16-bit size; quantized, more than half of it goes.
    parameters = architecture_from_config(family).parameters_billions * 1e9
    assert sixteen.total_bytes == pytest.approx(2 * parameters, rel=1e-3)
    assert parameters < eight.total_bytes < 1.2 * parameters
