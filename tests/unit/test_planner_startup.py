"""The planner's predicted engine start (planner/startup.py): each phase moves the way the GPU
runs did, the prediction stays near every measured start, and the startupProbe each engine pod
renders allows the predicted cold start twice over and never less than the GPU runs took."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from examplepods import EXAMPLES, engine_pod_templates
from localcluster.metricsstack.load import TINY_ARCHITECTURE

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.planner.startup import (
    PROBE_BUDGET_FLOOR_SECONDS,
    EngineShape,
    engine_init_seconds,
    predict_phases,
)
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

REPO = Path(__file__).resolve().parents[2]
MEASURED = json.loads((REPO / "bench/gpu/start-phases.json").read_text())
H100 = {"product": "NVIDIA-H100-80GB-HBM3", "memoryGiB": 80}
L8 = "meta-llama/Llama-3.1-8B-Instruct"
L70 = "meta-llama/Llama-3.1-70B-Instruct"
BASE = EngineShape(
    layers=32, tensor_parallel_size=1, quantized=False, weights_gib_per_gpu=15.0, download_gib=15.0
)


def total(shape: EngineShape, **options: Any) -> float:
    return predict_phases(shape, **options).total_seconds


@pytest.mark.parametrize(
    ("slower", "faster", "phase"),
    [
        pytest.param(
            replace(BASE, weights_gib_per_gpu=70.0),
            BASE,
            "weight_load_seconds",
            id="more-bytes-per-gpu-load-longer",
        ),
        pytest.param(
            replace(BASE, download_gib=140.0), BASE, "download_seconds", id="bigger-download"
        ),
        pytest.param(
            replace(BASE, layers=80), BASE, "compile_seconds", id="more-layers-compile-longer"
        ),
        pytest.param(
            replace(BASE, quantized=True), BASE, "compile_seconds", id="fp8-compiles-longer"
        ),
        pytest.param(
            replace(BASE, tensor_parallel_size=2),
            BASE,
            "imports_seconds",
            id="tp2-starts-a-worker-per-gpu",
        ),
        pytest.param(
            replace(BASE, tensor_parallel_size=2),
            BASE,
            "cuda_graphs_seconds",
            id="tp2-captures-graphs-longer",
        ),
    ],
)
def test_a_bigger_engine_takes_longer_in_that_phase_and_in_all(
    slower: EngineShape, faster: EngineShape, phase: str
) -> None:
    assert getattr(predict_phases(slower), phase) > getattr(predict_phases(faster), phase)
    assert total(slower) > total(faster)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(BASE, id="8b-tp1"),
        pytest.param(
            replace(BASE, layers=80, quantized=True, weights_gib_per_gpu=70), id="70b-fp8"
        ),
        pytest.param(replace(BASE, layers=80, tensor_parallel_size=2), id="70b-tp2"),
    ],
)
def test_a_warm_compile_cache_shortens_compile_and_warm_up_not_the_weights(
    shape: EngineShape,
) -> None:
    cold = predict_phases(shape)
    warm = predict_phases(shape, compile_cache_warm=True)

    assert warm.compile_seconds < cold.compile_seconds / 2
    assert warm.kv_profiling_seconds < cold.kv_profiling_seconds
    assert warm.total_seconds < cold.total_seconds
    for phase in ("imports_seconds", "download_seconds", "weight_load_seconds"):
        assert getattr(warm, phase) == getattr(cold, phase), phase


@pytest.mark.parametrize(
    ("bandwidth", "faster_bandwidth"),
    [pytest.param(0.5, 4.0, id="nvme-reads-faster-than-network-volume")],
)
def test_the_weight_load_follows_the_bandwidth_given(
    bandwidth: float, faster_bandwidth: float
) -> None:
    slow = predict_phases(BASE, weight_load_gib_per_s=bandwidth)
    fast = predict_phases(BASE, weight_load_gib_per_s=faster_bandwidth)

    assert slow.weight_load_seconds - fast.weight_load_seconds == pytest.approx(
        BASE.weights_gib_per_gpu * (1 / bandwidth - 1 / faster_bandwidth), abs=0.2
    )


# Layers of the measured models (their config.json); the others are held-out shapes.
LAYERS = {"llama-3.1-8b": 32, "llama-3.1-70b": 80, "gemma-2-9b": 42, "qwen2.5-32b": 64}
FITTED = [run for run in MEASURED if run["model"] in LAYERS]


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(r, id=r["log"].removesuffix(".log.gz"))
        for r in MEASURED
        if r["model"] in LAYERS
    ],
)
def test_the_prediction_stays_near_each_measured_gpu_start(run: dict[str, Any]) -> None:
    shape = EngineShape(
        layers=LAYERS[run["model"]],
        tensor_parallel_size=run["tensor_parallel_size"],
        quantized=run["quantization"] != "None",
        weights_gib_per_gpu=0.0,  # dummy weights: no I/O in these runs
        download_gib=0.0,
    )
    predicted = engine_init_seconds(
        predict_phases(shape, compile_cache_warm=not run["compiled_afresh"])
    )

    assert predicted == pytest.approx(run["init_s"], rel=0.5)


def spec(name: str, gpus: int, **model: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {"model": {"name": name, **model}, "gpus": {"count": gpus, **H100}}
    )


@pytest.mark.parametrize(
    ("uncached", "cached"),
    [
        pytest.param(spec(L8, 1), spec(L8, 1, cache={"claimName": "hf"}), id="8b"),
        pytest.param(spec(L70, 4), spec(L70, 4, cache={"claimName": "hf"}), id="70b-tp4"),
    ],
)
def test_a_model_cache_spares_warm_starts_the_download_not_cold_ones(
    uncached: LLMDeploymentSpec, cached: LLMDeploymentSpec
) -> None:
    without, with_cache = plan(uncached).startup, plan(cached).startup
    assert without is not None
    assert with_cache is not None

    assert with_cache.cold.download_seconds == without.cold.download_seconds > 0
    assert with_cache.warm.download_seconds == 0 < without.warm.download_seconds


def test_a_model_at_a_path_in_the_container_is_not_downloaded() -> None:
    local = plan(spec("/models/tiny", 1, architecture=TINY_ARCHITECTURE)).startup
    assert local is not None
    assert local.cold.download_seconds == 0


def probes(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    s = LLMDeploymentSpec.model_validate(manifest["spec"])
    p = plan(s)
    objects = render_fleet(Owner(name="m", namespace="ns", uid="u"), s, p, FLEET).objects()
    return [
        (where, c["startupProbe"])
        for where, template in engine_pod_templates(objects).items()
        for c in template["spec"]["containers"]
        if "startupProbe" in c
    ]


SLOWEST_MEASURED_START = max(r["init_s"] for r in MEASURED)


@pytest.mark.parametrize(("example", "manifest"), EXAMPLES.items())
def test_every_engine_probe_allows_twice_the_predicted_cold_start(
    example: str, manifest: dict[str, Any]
) -> None:
    s = LLMDeploymentSpec.model_validate(manifest["spec"])
    startup = plan(s).startup
    found = probes(manifest)
    assert found, f"{example}: no engine container with a startupProbe"

    for where, probe in found:
        allowed = probe["failureThreshold"] * probe["periodSeconds"]
        assert allowed > SLOWEST_MEASURED_START, where
        assert allowed >= PROBE_BUDGET_FLOOR_SECONDS, where
        if startup is not None:
            cold = startup.cold
            assert allowed >= 2 * (cold.total_seconds - cold.scheduling_seconds), where
