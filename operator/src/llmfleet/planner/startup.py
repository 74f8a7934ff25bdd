"""Predict an engine pod's start, phase by phase, and the startupProbe budget that follows.

Fitted to the 40 engine starts of bench/gpu/start-phases.json (`make bench BENCH=gpu_start`,
from vLLM 0.26.0's logs of the H100 and H200 runs of 2026-11-23 to 2026-11-27 under
bench/gpu/logs/): Llama-3.1-8B to a 70B fp8 at TP 1, 2 and 4. Those engines ran with dummy
weights, so the weight I/O was never measured: the load here is the pod's share of the bytes at
a bandwidth (WEIGHT_LOAD_GIB_PER_S by default) on top of what the dummy load took. Nor did they
have an API server or a pod around them: scheduling and API readiness are assumptions, named as
such. `bench/gpu_start.py` reports how far these constants miss each measured start
(`startup_prediction_error_max_pct`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.models.startup import StartPhases, StartupPrediction

# --- Fitted to bench/gpu/start-phases.json (vLLM 0.26.0, H100 and H200, 2026-11-23..27). ---
# `vllm.LLM()` called to the model load, less the load: imports, config and process start. The
# median of the TP1 starts is 38 s; starts at TP > 1 spawn a worker per GPU (median 59 s).
IMPORTS_SECONDS_TP1 = 38.0
IMPORTS_SECONDS_EXTRA_WORKERS = 21.0
# "Model loading took" with dummy weights: 1.5-5 s, whatever the size (allocation, no I/O).
LOAD_OVERHEAD_SECONDS = 3.0
# torch.compile with an empty cache grows with the layers: 17-27 s for 32-layer 8Bs, 35-41 s for
# the 80-layer 70B in bf16 (least squares: 12 s + 0.33 s a layer). The fp8-quantized-on-load 70B
# took 62-81 s, 1.8 times as long; an fp8 checkpoint (compressed-tensors 8B) 1.5 times.
COMPILE_BASE_SECONDS = 12.0
COMPILE_SECONDS_PER_LAYER = 0.33
COMPILE_QUANTIZED_FACTOR = 1.8
# "Directly load the compiled graph" from an earlier start: 4.9-6.0 s for the 8B where cold took
# 23-27 s, 14.5-22.8 s for the 70B fp8 where cold took 62-81 s: a quarter of cold.
COMPILE_WARM_FACTOR = 0.25
# "Graph capturing finished": a median of 6 s at TP1, 12 s at TP 2 and 4.
CUDA_GRAPHS_SECONDS_TP1 = 6.0
CUDA_GRAPHS_SECONDS_MULTI_GPU = 12.0
# vLLM's engine init less compile and graph capture: the profiling run, the KV cache and the
# warm-up, 14-23 s of every cold start (median 19 s). The five warm starts took either 2-4 s
# or 23-27 s of it: the middle of the two.
KV_PROFILING_SECONDS = 19.0
KV_PROFILING_WARM_SECONDS = 11.0

# --- Not measured on a GPU: assumptions, documented in docs/planner.md. ---
# Scheduling and container start with the image already on the node (the lab's CPU pods took
# a few seconds; an image pull of vLLM's ~10 GiB image is not predicted).
SCHEDULING_SECONDS = 10.0
# vLLM's API server after the engine is ready, until /health answers.
API_READY_SECONDS = 5.0
# Bandwidth of each GPU's weight read: a network volume or a cold page cache (local NVMe reads
# several times faster). Dummy weights left it unmeasured.
WEIGHT_LOAD_GIB_PER_S = 1.0
# Downloading from the Hugging Face Hub (about 100 MiB/s, the figure the budget used before).
DOWNLOAD_GIB_PER_S = 0.1

# The probe allows twice the predicted start from the container's start, and never less than
# the floor: the slowest measured start (176.7 s, a 70B fp8 at TP2) with the API server and room.
PROBE_BUDGET_FACTOR = 2.0
PROBE_BUDGET_FLOOR_SECONDS = 300


@dataclass(frozen=True)
class EngineShape:
    """What the start depends on: the layers one GPU compiles, the GPUs of a pod, the bytes."""

    layers: int
    tensor_parallel_size: int
    quantized: bool
    weights_gib_per_gpu: float
    # What the pod downloads before loading (the whole checkpoint); 0 when it is at hand.
    download_gib: float


def predict_phases(
    shape: EngineShape,
    *,
    compile_cache_warm: bool = False,
    weight_load_gib_per_s: float = WEIGHT_LOAD_GIB_PER_S,
    download_gib_per_s: float = DOWNLOAD_GIB_PER_S,
) -> StartPhases:
    """Each phase of one pod's start. A cold start (the default) compiles afresh."""
    multi_gpu = shape.tensor_parallel_size > 1
    imports_s = IMPORTS_SECONDS_TP1 + (IMPORTS_SECONDS_EXTRA_WORKERS if multi_gpu else 0.0)
    compile_s = COMPILE_BASE_SECONDS + COMPILE_SECONDS_PER_LAYER * shape.layers
    if shape.quantized:
        compile_s *= COMPILE_QUANTIZED_FACTOR
    if compile_cache_warm:
        compile_s *= COMPILE_WARM_FACTOR
    phases = {
        "scheduling_seconds": SCHEDULING_SECONDS,
        "imports_seconds": imports_s,
        "download_seconds": shape.download_gib / download_gib_per_s,
        "weight_load_seconds": LOAD_OVERHEAD_SECONDS
        + shape.weights_gib_per_gpu / weight_load_gib_per_s,
        "compile_seconds": compile_s,
        "cuda_graphs_seconds": (
            CUDA_GRAPHS_SECONDS_MULTI_GPU if multi_gpu else CUDA_GRAPHS_SECONDS_TP1
        ),
        "kv_profiling_seconds": (
            KV_PROFILING_WARM_SECONDS if compile_cache_warm else KV_PROFILING_SECONDS
        ),
        "api_ready_seconds": API_READY_SECONDS,
    }
    rounded = {name: round(seconds, 1) for name, seconds in phases.items()}
    return StartPhases(**rounded, total_seconds=round(sum(rounded.values()), 1))


def engine_init_seconds(phases: StartPhases) -> float:
    """`vllm.LLM()` called to ready: what the GPU runs timed (bench/gpu_start.py compares)."""
    return (
        phases.imports_seconds
        + phases.weight_load_seconds
        + phases.compile_seconds
        + phases.cuda_graphs_seconds
        + phases.kv_profiling_seconds
    )


def probe_budget_seconds(cold: StartPhases) -> int:
    """The startupProbe starts with the container, so scheduling is not its to wait for."""
    from_container = cold.total_seconds - cold.scheduling_seconds
    return max(PROBE_BUDGET_FLOOR_SECONDS, math.ceil(PROBE_BUDGET_FACTOR * from_container))


def predict_startup(
    shape: EngineShape,
    *,
    weights_cached: bool,
    weight_load_gib_per_s: float = WEIGHT_LOAD_GIB_PER_S,
    download_gib_per_s: float = DOWNLOAD_GIB_PER_S,
) -> StartupPrediction:
    """Cold: an empty compile cache and the weights downloaded. Warm: a compile cache from an
    earlier start, and no download where `weights_cached` (spec.model.cache holds them)."""
    cold = predict_phases(
        shape, weight_load_gib_per_s=weight_load_gib_per_s, download_gib_per_s=download_gib_per_s
    )
    warm = predict_phases(
        replace(shape, download_gib=0.0) if weights_cached else shape,
        compile_cache_warm=True,
        weight_load_gib_per_s=weight_load_gib_per_s,
        download_gib_per_s=download_gib_per_s,
    )
    return StartupPrediction(
        cold=cold,
        warm=warm,
        probe_budget_seconds=probe_budget_seconds(cold),
        weight_load_gib_per_second=weight_load_gib_per_s,
        download_gib_per_second=download_gib_per_s,
    )


def plan_startup(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    *,
    quantized: bool,
    weights_gib: float,
    weights_gib_per_gpu: float,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> StartupPrediction:
    """The start of one engine pod of a GPU plan. A model named by a path in the container is
    at hand; every pod of the hub's or an object store's fetches the whole checkpoint (vLLM
    downloads every weight file, whatever share it loads), unless spec.model.cache holds it."""
    shape = EngineShape(
        layers=math.ceil(arch.num_layers / pipeline_parallel_size),
        tensor_parallel_size=tensor_parallel_size,
        quantized=quantized,
        weights_gib_per_gpu=weights_gib_per_gpu,
        download_gib=0.0 if spec.model.name.startswith("/") else weights_gib,
    )
    return predict_startup(shape, weights_cached=spec.model.cache is not None)
