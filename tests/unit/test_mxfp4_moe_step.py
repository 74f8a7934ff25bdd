"""The MXFP4 MoE step's fixed cost (vLLM's TRITON backend: routing kernels and two matmul_ogs
launches per layer): which pods pay it, that it does not grow with the batch, and that with it
the planner's batch-1 step for gpt-oss matches what two H200 engines of each model measured."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llmfleet.catalog.hfconfig import architecture_from_config
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner.efficiencies import CALIBRATED, Efficiencies
from llmfleet.planner.performance import Gpu, PodModel, pod_model
from llmfleet.planner.weights import resolve_weights

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).parent / "data" / "hf-configs"
# gpt-oss-20b and -120b on one H200, every point warmed once untimed (gw-*) and the fastest of
# three (gm-*), vLLM 0.26.0, 2026-11-28 (bench/gpu/README.md).
WARM_RUN = REPO / "bench" / "gpu" / "h200-2026-11-28-gptoss-warm.jsonl"
# An H200's datasheet figures, as the chart's h200-141gb profile has them.
H200 = Gpu(hbm_gbps=4800, bf16_tflops=989, fp8_tflops=1979, interconnect_gbps=450)
WITHOUT = replace(CALIBRATED, mxfp4_layer_overhead_us=0.0)


def pod(name: str, efficiencies: Efficiencies = CALIBRATED) -> PodModel:
    config: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    spec = LLMDeploymentSpec.model_validate(
        {"model": {"name": name.replace("--", "/")}, "gpus": {"count": 1, "profile": "h200-141gb"}}
    )
    return pod_model(
        architecture_from_config(config),
        dtype="auto",
        quantization=resolve_weights(spec, config, from_config=True),
        tensor_parallel_size=1,
        gpu=H200,
        max_num_batched_tokens=16384,
        efficiencies=efficiencies,
    )


@pytest.mark.parametrize(
    ("model", "moe_layers"),
    [
        ("openai--gpt-oss-20b", 24),  # MXFP4 experts: every layer is a TRITON MoE layer
        ("openai--gpt-oss-120b", 36),
        ("Qwen--Qwen3-30B-A3B", 0),  # a bf16 mixture of experts runs the fused_moe kernels
        ("Qwen--Qwen2.5-7B-Instruct-AWQ", 0),  # w4a16 on every linear layer, no MoE
    ],
)
@pytest.mark.parametrize("sequences", [1, 64, 256])
def test_only_mxfp4_experts_pay_the_moe_layer_cost_and_it_does_not_grow_with_the_batch(
    model: str, moe_layers: int, sequences: int
) -> None:
    added = pod(model).step_s(sequences, 1024) - pod(model, WITHOUT).step_s(sequences, 1024)

    assert added == pytest.approx(moe_layers * CALIBRATED.mxfp4_layer_overhead_us * 1e-6)


def measured_batch1_steps() -> list[tuple[str, str, float]]:
    engines, steps = {}, []
    for line in WARM_RUN.read_text().splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["kind"] == "engine":
            engines[r["tag"]] = r["model"]
        elif r["kind"] == "point" and r["concurrency"] == 1:
            steps.append((r["tag"], f"openai--{engines[r['tag']]}", r["itl_ms"]))
    return steps


def test_the_warm_run_has_batch1_steps_of_both_models_on_two_engines_each() -> None:
    found = measured_batch1_steps()

    assert sorted(model for _, model, _ in found) == 2 * ["openai--gpt-oss-120b"] + 2 * [
        "openai--gpt-oss-20b"
    ]


@pytest.mark.parametrize(("tag", "model", "itl_ms"), measured_batch1_steps(), ids=str)
def test_gpt_oss_batch1_step_is_what_an_h200_measured_only_with_the_moe_layer_cost(
    tag: str, model: str, itl_ms: float
) -> None:
    with_cost = pod(model).itl_s(1, 512, 64) * 1e3
    without = pod(model, WITHOUT).itl_s(1, 512, 64) * 1e3

    assert with_cost == pytest.approx(itl_ms, rel=0.03), tag
    # Without it the planner promised a step over a fifth faster than vLLM ran.
    assert without < 0.8 * itl_ms, tag
