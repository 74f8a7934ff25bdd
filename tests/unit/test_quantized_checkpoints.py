"""Pre-quantized checkpoints planned from their own config.json (tests/unit/data/hf-configs/):
their weights against the bytes the checkpoint holds, DeepSeek-V3 in fp8 on one node of H200,
spec.model.quantization checked against the checkpoint, formats not modelled refused by name,
and the vLLM flags that follow."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmfleet.catalog.hfconfig import architecture_from_config, checkpoint_weights
from llmfleet.cli import main
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan
from llmfleet.planner.memory import weights_gib
from llmfleet.planner.performance import Gpu, pod_model
from llmfleet.planner.weights import resolve_weights

CONFIGS = Path(__file__).parent / "data" / "hf-configs"
# Qwen2.5-7B-Instruct's own name is in the catalog, which wins over config.json; a fine-tune of
# it is not.
SIXTEEN_BIT = "Qwen--Qwen2.5-7B-Instruct"
FINE_TUNE = "acme-labs--qwen2.5-7b-ft"
H200 = {"count": 16, "profile": "h200-141gb"}
H100 = {"count": 1, "profile": "h100-80gb"}
GIB = 1024**3
# An H100 SXM's datasheet figures.
POD: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "gpu": Gpu(hbm_gbps=3350, bf16_tflops=989, fp8_tflops=1979, interconnect_gbps=450),
    "max_num_batched_tokens": 8192,
}


def config(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return loaded


def spec(name: str, gpus: dict[str, Any] = H100, **model: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {
                "name": (FINE_TUNE if name == SIXTEEN_BIT else name).replace("--", "/"),
                **model,
            },
            "gpus": gpus,
        }
    )


# The checkpoints' safetensors, tensor by tensor as each format writes them (name: shape,
# bytes per element), from the shapes in config.json. This is the byte count the planner's
# figure is held to: the Hub is not reachable from here, so the repositories'
# model.safetensors.index.json total_size could not be read for these three.
Tensors = Iterator[tuple[str, int]]


def _projections(c: dict[str, Any]) -> Iterator[tuple[str, int, int]]:
    hidden, inter = c["hidden_size"], c["intermediate_size"]
    head = hidden // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * head
    for i in range(c["num_hidden_layers"]):
        for name, inputs, outputs in [
            ("self_attn.q_proj", hidden, hidden),
            ("self_attn.k_proj", hidden, kv),
            ("self_attn.v_proj", hidden, kv),
            ("self_attn.o_proj", hidden, hidden),
            ("mlp.gate_proj", hidden, inter),
            ("mlp.up_proj", hidden, inter),
            ("mlp.down_proj", inter, hidden),
        ]:
            yield f"model.layers.{i}.{name}", inputs, outputs


def _unquantized(c: dict[str, Any], half: int = 2) -> Tensors:
    """Embeddings, output head, norms and (Qwen2) q/k/v biases: 16-bit in every format here."""
    hidden = c["hidden_size"]
    kv = c["num_key_value_heads"] * hidden // c["num_attention_heads"]
    yield "model.embed_tokens.weight", c["vocab_size"] * hidden * half
    yield "lm_head.weight", c["vocab_size"] * hidden * half
    yield "model.norm.weight", hidden * half
    for i in range(c["num_hidden_layers"]):
        yield f"model.layers.{i}.input_layernorm.weight", hidden * half
        yield f"model.layers.{i}.post_attention_layernorm.weight", hidden * half
        if c["architectures"] == ["Qwen2ForCausalLM"]:
            yield f"model.layers.{i}.self_attn.q_proj.bias", hidden * half
            yield f"model.layers.{i}.self_attn.k_proj.bias", kv * half
            yield f"model.layers.{i}.self_attn.v_proj.bias", kv * half


def autoawq_gemm(c: dict[str, Any]) -> Tensors:
    """AutoAWQ's GEMM layout: qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales
    fp16 [in/g, out]."""
    group = c["quantization_config"]["group_size"]
    for name, inputs, outputs in _projections(c):
        yield f"{name}.qweight", inputs * outputs // 8 * 4
        yield f"{name}.qzeros", inputs // group * outputs // 8 * 4
        yield f"{name}.scales", inputs // group * outputs * 2
    yield from _unquantized(c)


def autogptq(c: dict[str, Any]) -> Tensors:
    """AutoGPTQ/Optimum's layout: qweight int32 [in/8, out], qzeros int32 [in/g, out/8], scales
    fp16 [in/g, out], g_idx int32 [in]."""
    group = c["quantization_config"]["group_size"]
    for name, inputs, outputs in _projections(c):
        yield f"{name}.qweight", inputs // 8 * outputs * 4
        yield f"{name}.qzeros", inputs // group * outputs // 8 * 4
        yield f"{name}.scales", inputs // group * outputs * 2
        yield f"{name}.g_idx", inputs * 4
    yield from _unquantized(c)


def compressed_tensors_fp8_per_tensor(c: dict[str, Any]) -> Tensors:
    """compressed-tensors float-quantized, static per-tensor: weight float8_e4m3 [out, in],
    weight_scale and input_scale fp32 [1]; lm_head ignored (bf16)."""
    for name, inputs, outputs in _projections(c):
        yield f"{name}.weight", inputs * outputs
        yield f"{name}.weight_scale", 4
        yield f"{name}.input_scale", 4
    yield from _unquantized(c)


@pytest.mark.parametrize(
    ("name", "layout", "kernel"),
    [
        pytest.param("Qwen--Qwen2.5-7B-Instruct-AWQ", autoawq_gemm, "w4a16", id="awq"),
        pytest.param("Qwen--Qwen2.5-7B-Instruct-GPTQ-Int4", autogptq, "w4a16", id="gptq"),
        pytest.param(
            "RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8",
            compressed_tensors_fp8_per_tensor,
            "w8a8",
            id="compressed-tensors-fp8",
        ),
    ],
)
def test_a_quantized_checkpoint_is_sized_within_2_percent_of_the_bytes_it_holds(
    name: str, layout: Callable[[dict[str, Any]], Tensors], kernel: str
) -> None:
    c = config(name)
    held = sum(size for _, size in layout(c))

    weights = checkpoint_weights(c)
    planned = plan(spec(name), model_config=c)

    assert weights is not None
    assert weights.format.kernel == kernel
    assert weights.total_bytes == pytest.approx(held, rel=0.02)
    assert planned.weights_gib == pytest.approx(held / GIB, rel=0.02)
    # Not the 16-bit figure the planner gave before it read quantization_config.
    assert planned.weights_gib < 0.8 * weights_gib(architecture_from_config(c), "auto", "none")


def test_deepseek_v3_is_sized_as_the_fp8_checkpoint_it_is() -> None:
    c = config("deepseek-ai--DeepSeek-V3")
    weights = checkpoint_weights(c)
    assert weights is not None
    # deepseek-ai/DeepSeek-V3 at revision afb92e1fa402: its weight files hold 688,586,727,753
    # bytes, as a public survey of model artifacts quotes that revision (the Hub, and so the
    # repository's model.safetensors.index.json, is not reachable from here). They include the
    # multi-token-prediction layer 61, which vLLM loads only for speculative decoding: one
    # more MoE decoder layer in fp8, its own bf16 embeddings and output head, and the bf16
    # eh_proj (hidden x 2 hidden) and norms.
    with_mtp = checkpoint_weights({**c, "num_hidden_layers": c["num_hidden_layers"] + 1})
    assert with_mtp is not None
    hidden, vocab = c["hidden_size"], c["vocab_size"]
    mtp = with_mtp.total_bytes - weights.total_bytes
    mtp += 2 * vocab * hidden * 2 + hidden * 2 * hidden * 2 + 3 * hidden * 2

    assert weights.total_bytes + mtp == pytest.approx(688_586_727_753, rel=0.01)
    assert weights.format.block == (128, 128)


def test_deepseek_v3_plans_in_fp8_at_eight_h200_per_replica_on_one_node() -> None:
    c = config("deepseek-ai--DeepSeek-V3")

    planned = plan(spec("deepseek-ai--DeepSeek-V3", H200), model_config=c)

    # Read as 16-bit it was 1,249.88 GiB: 16 H200 as one TP8 x PP2 replica over two nodes
    # (LeaderWorkerSet). In fp8 8 GPUs hold it, so the 16 make two single-node replicas.
    assert planned.strategy != "MultiNode"
    assert (planned.tensor_parallel_size, planned.pipeline_parallel_size) == (8, 1)
    assert (planned.gpus_per_replica, planned.replicas) == (8, 2)
    assert planned.weights_gib == pytest.approx(626.92, abs=0.05)
    assert "--quantization" not in planned.vllm_args
    assert "one scale per 128x128 block, from the quantization_config of config.json" in (
        " ".join(planned.reason.split())
    )


@pytest.mark.parametrize(
    ("name", "quantization", "said"),
    [
        pytest.param(
            "Qwen--Qwen2.5-7B-Instruct-AWQ",
            "gptq",
            "spec.model.quantization: gptq contradicts config.json of Qwen/Qwen2.5-7B-Instruct-AWQ"
            "@main, whose quantization_config says quant_method awq",
            id="awq-checkpoint-gptq-spec",
        ),
        pytest.param(
            "RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8",
            "int8",
            "spec.model.quantization: int8 contradicts config.json of RedHatAI/Meta-Llama-3.1-8B-"
            "Instruct-FP8@main, whose quantization_config says quant_method compressed-tensors",
            id="fp8-checkpoint-int8-spec",
        ),
        pytest.param(
            SIXTEEN_BIT,
            "awq",
            "spec.model.quantization: awq contradicts config.json of acme-labs/qwen2.5-7b-ft@main,"
            " which has no quantization_config",
            id="16-bit-checkpoint-awq-spec",
        ),
    ],
)
def test_a_spec_quantization_the_checkpoint_contradicts_is_refused_naming_both(
    name: str, quantization: str, said: str
) -> None:
    with pytest.raises(PlanError) as refused:
        plan(spec(name, quantization=quantization), model_config=config(name))

    assert refused.value.field == "spec.model.quantization"
    assert refused.value.reason == "QuantizationMismatch"
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("quantization_config", "said"),
    [
        pytest.param(
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            "'bitsandbytes' is not modelled (vLLM 0.32, the engine LLMFleet pins, has no "
            "bitsandbytes quantization method",
            id="bitsandbytes",
        ),
        pytest.param(
            {"quant_method": "modelopt", "quant_algo": "NVFP4"},
            "'modelopt' is not modelled (the planner does not model it); modelled: fp8, "
            "compressed-tensors, awq, gptq, mxfp4",
            id="modelopt",
        ),
        pytest.param(
            {"quant_method": "awq", "bits": 3, "group_size": 128, "zero_point": True},
            "quantization_config.bits 3 is not modelled; modelled: 4, 8",
            id="awq-3-bit",
        ),
    ],
)
def test_a_format_not_modelled_is_refused_naming_it(
    quantization_config: dict[str, Any], said: str
) -> None:
    c = {
        **config(SIXTEEN_BIT),
        "quantization_config": quantization_config,
    }

    with pytest.raises(PlanError) as refused:
        plan(spec(SIXTEEN_BIT), model_config=c)

    assert refused.value.reason == "ModelConfigUnsupported"
    assert said in refused.value.message


@pytest.mark.parametrize(
    ("name", "quantization", "flag"),
    [
        # vLLM reads a pre-quantized checkpoint's format itself: nothing to pass, whether the
        # spec leaves quantization at none or names the checkpoint's format.
        pytest.param("RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8", "none", None, id="ct-fp8"),
        pytest.param("RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8", "fp8", None, id="ct-fp8-named"),
        pytest.param("Qwen--Qwen2.5-7B-Instruct-AWQ", "awq", None, id="awq-named"),
        # A 16-bit checkpoint in fp8 is quantized on load: vLLM must be told.
        pytest.param(SIXTEEN_BIT, "fp8", "fp8", id="online-fp8"),
        pytest.param(SIXTEEN_BIT, "none", None, id="16-bit"),
    ],
)
def test_quantization_is_passed_to_vllm_only_where_it_quantizes_on_load(
    name: str, quantization: str, flag: str | None
) -> None:
    args = plan(spec(name, quantization=quantization), model_config=config(name)).vllm_args

    given = args[args.index("--quantization") + 1] if "--quantization" in args else None
    assert given == flag


@pytest.mark.parametrize(
    ("name", "kernel"),
    [
        pytest.param("Qwen--Qwen2.5-7B-Instruct-AWQ", "w4a16", id="awq"),
        pytest.param("RedHatAI--Meta-Llama-3.1-8B-Instruct-FP8", "w8a8", id="fp8"),
    ],
)
def test_quantized_weights_decode_alone_at_their_bytes_and_batches_at_their_kernels_math(
    name: str, kernel: str
) -> None:
    c = config(name)
    weights = resolve_weights(spec(name), c, from_config=True)
    arch = architecture_from_config(c)
    quantized = pod_model(arch, dtype="auto", quantization=weights, **POD)
    sixteen = pod_model(arch, dtype="auto", quantization="none", **POD)
    bytes_ratio = weights_gib(arch, "auto", weights) / weights_gib(arch, "auto", "none")

    # One sequence: a bandwidth-bound step reads every weight once, so it costs about the
    # weights' bytes (plus the fixed per-step cost, the same in both).
    alone = quantized.itl_s(1, 1000, 500) / sixteen.itl_s(1, 1000, 500)
    assert bytes_ratio < alone < 1
    # A large batch is compute-bound: 4-bit weights are dequantized to 16 bits and multiply
    # at the bf16 rate, so they gain nothing there; w8a8 multiplies on the fp8 tensor cores.
    batched = quantized.step_s(0, 0, 8192, 1000) / sixteen.step_s(0, 0, 8192, 1000)
    if kernel == "w4a16":
        assert batched == pytest.approx(1, abs=0.02)
    else:
        assert batched < 0.8


def awq_manifest(tmp_path: Path, quantization: str) -> str:
    path = tmp_path / "awq.yaml"
    path.write_text(
        "apiVersion: llmfleet.dev/v1alpha1\nkind: LLMDeployment\nmetadata: {name: awq}\n"
        "spec:\n"
        f"  model: {{name: Qwen/Qwen2.5-7B-Instruct-AWQ, quantization: {quantization}}}\n"
        "  gpus: {count: 1, profile: h100-80gb}\n"
    )
    return str(path)


def test_llmfleet_plan_says_the_format_came_from_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = str(CONFIGS / "Qwen--Qwen2.5-7B-Instruct-AWQ.json")

    assert main(["plan", "-f", awq_manifest(tmp_path, "none"), "--model-config", given]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert main(["plan", "-f", awq_manifest(tmp_path, "gptq"), "--model-config", given]) == 2
    err = " ".join(capsys.readouterr().err.split())

    assert (
        "Weights: 4-bit AWQ weights, one 16-bit scale and zero point per 128 inputs, from the "
        "quantization_config of config.json of Qwen/Qwen2.5-7B-Instruct-AWQ@main." in out
    )
    assert "5.2 GiB of 4-bit AWQ weights" in out
    assert (
        "Weights format: 4-bit AWQ weights, one 16-bit scale and zero point per 128 inputs (the "
        "quantization_config of config.json of Qwen/Qwen2.5-7B-Instruct-AWQ@main)" in out
    )
    assert "spec.model.quantization: gptq contradicts" in err
    assert "quant_method awq" in err


# Qwen2.5-72B-Instruct's published figures, on Qwen2.5-7B-Instruct's config.json.
QWEN_72B = {
    **config(SIXTEEN_BIT),
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "max_window_layers": 80,
}


def test_a_72b_fp8_checkpoint_takes_the_gpus_of_fp8_not_of_16_bit() -> None:
    gpus = {"count": 4, "profile": "h100-80gb"}
    fp8_checkpoint = {
        **QWEN_72B,
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    }

    sixteen = plan(spec(FINE_TUNE, gpus), model_config=QWEN_72B)
    on_load = plan(spec(FINE_TUNE, gpus, quantization="fp8"), model_config=QWEN_72B)
    checkpoint = plan(spec(FINE_TUNE, gpus), model_config=fp8_checkpoint)

    assert sixteen.tensor_parallel_size == 4
    # The same weights whether vLLM quantizes them on load or reads them quantized.
    assert checkpoint.tensor_parallel_size == on_load.tensor_parallel_size == 2
    assert checkpoint.weights_gib == pytest.approx(on_load.weights_gib, rel=0.001)
