"""The planner against real vLLM on real GPUs, from the runs committed under bench/gpu/.

No GPU is needed here: the GPU runs (bench/gpu/run.sh, measure.py) produced the JSON lines this
reads. It fits the performance model's efficiencies to the calibration runs (the H100 sweep and
batch-1 TTFTs of 2026-11-23 in reference-h100-2026-11-23.json, bf16, with the 60-layer shape
heldout-deep-10b's TP 1 and TP 2 engines of 2026-11-27 on H200s), and its two fp8 constants
to the Llama-3.1-70B fp8 runs on one H200 (2026-11-24) with the bf16 ones held fixed; compares
the model, with the constants the planner ships, on every point that was left out of the fits
(other concurrencies, prompt lengths, a second model shape, an H200 in bf16, the H100 in fp8)
and on the held-out shape heldout-wide-17b (TP 1, TP 2, a tight fit; 2 x H200, 2026-11-27), with
the planner's choice between 2 x TP 1 and TP 2 against the measured winner, and the planner's
KV-cache figure with vLLM's for every engine started (and that the planner
refuses what vLLM refused). With LoRA on (kv_check.py runs of 2026-11-25, H100), the KV cache
vLLM gives up against the planner's LoRA buffers, and the planner's KV tokens with them. With
gpt-oss's MXFP4 experts (1 x H200; gpu_mxfp4.py): gpt-oss-20b's weights and KV tokens
(2026-11-27), and gpt-oss-20b's and -120b's speed on warm engines (2026-11-28), whose batch-1
steps alone fit the MXFP4 MoE layer's fixed cost. Writes bench/gpu/calibration.json and
bench/plots/prediction.png.

`python -m bench.gpu_model --fit` (bf16), `--fit-fp8` and `--fit-mxfp4` print the fitted
constants (copy them into operator/src/llmfleet/planner/efficiencies.py); `make bench
BENCH=gpu_model` records the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.gpu_edges import edge_figures, edge_report
from bench.gpu_mxfp4 import FITTED as MXFP4_FITTED
from bench.gpu_mxfp4 import WARM_RUNS as MXFP4_RUNS
from bench.gpu_mxfp4 import (
    cross_fit,
    is_fitted,
    is_mxfp4,
    measured,
    memory_rows,
    reported_kv_tokens,
)
from bench.gpu_mxfp4 import figures as mxfp4_figures
from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.catalog.hfconfig import (
    CheckpointWeights,
    architecture_from_config,
    checkpoint_weights,
)
from llmfleet.catalog.hub import load_config_file
from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.models.engine import KvCacheDtype
from llmfleet.models.model_spec import ModelArchitecture, Quantization
from llmfleet.planner.efficiencies import CALIBRATED, Efficiencies
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_gpu
from llmfleet.planner.lora import LoraSettings, buffer_gib, gpu_buffer_bytes
from llmfleet.planner.memory import GpuFit, fit_on_gpu
from llmfleet.planner.performance import Gpu, PodModel, pod_model
from llmfleet.planner.weights import Weights, typed

HERE = Path(__file__).resolve().parent
DATA = HERE / "gpu"
REFERENCE = DATA / "reference-h100-2026-11-23.json"
RUNS = (
    "h100-2026-11-23-a.jsonl",
    "h100-2026-11-23-b.jsonl",
    "h100-2026-11-23-c.jsonl",
    "h200-2026-11-23.jsonl",
    "h100-2026-11-24-70b-fp8.jsonl",
)
# The fp8 constants are fitted to these runs' points; the H100 fp8 points are held out.
FP8_CALIBRATION_RUNS = ("h200-2026-11-24-70b-fp8.jsonl",)
# kv_check.py (shared/gpu) lines: one engine without LoRA and the same engine with
# enable_lora/max_loras/max_lora_rank, one session on one GPU (logs: bench/gpu/logs/<tag>.log.gz).
LORA_RUNS = ("h100-2026-11-25-lora.jsonl",)
# 2 x H200, 2026-11-25 (run.sh phases edges, tp2, spread): tight fits of a wide MLP (Qwen2.5-32B at
# 0.6) and of Llama-3.1-70B in fp8 at the H100's 0.95 budget (0.538 of an H200) compiling afresh,
# Llama-3.1-8B at TP 2, and the same saturation run four times over (top-p and greedy).
EDGE_RUNS = ("h200x2-2026-11-25.jsonl",)
# 2 x H200, 2026-11-27 (two_gpu.sh): two dense shapes no earlier run had (bench/gpu/models/), each
# as 2 x TP1 (engines side by side), TP2 and a tight fit. The 60-layer shape's TP1 and TP2 engines
# join the bf16 fit (one depth alone cannot tell a per-layer cost from a per-step one, and TP2
# alone shows the tensor-parallel layer's cost); the 48-layer shape (all of it) and the deep
# shape's tight fit stay out and check it. The q42-* lines (fp8 checkpoint, fp8 KV cache) are
# another issue's.
HELDOUT_RUNS = ("h200x2-2026-11-27.jsonl",)
# 1 x H200, 2026-11-27 (quant_drift.sh): engines started twice on one compile cache (d-*-cold
# compiled afresh, d-*-warm loaded the first start's torch.compile cache) and Qwen2.5-7B-Instruct
# as AWQ and GPTQ-Int4 checkpoints (q-*, w4a16 through Machete). Not in any fit. The line tagged
# -unquantized is a GPTQ run vLLM loaded in 16 bits (a config-only folder: no safetensors for its
# modules_in_block_to_quantize detection), so it is not a w4a16 engine and is left out. The
# g-gpt-oss-* engines (MXFP4 experts, gpu_mxfp4.py) have figures of their own and stay out of the
# w4a16 and checkpoint ones: another kernel (triton_kernels' matmul_ogs, not Marlin).
QUANT_DRIFT_RUNS = ("h200-2026-11-27-quant-drift.jsonl",)
NOT_W4A16 = "-unquantized"
HELDOUT_SHAPES = ("heldout-wide-17b", "heldout-deep-10b")
FIT_TAGS = ("deep-tp1-a", "deep-tp1-b", "deep-tp2")
# Measured winners (greedy saturation, 512/256, output tok/s per GPU): 2 x TP1 5,091 vs TP2 4,376
# (wide), 7,282 vs 6,091 (deep).
TWO_GPU_PLANS = {shape: DATA / f"plan-{shape}.yaml" for shape in HELDOUT_SHAPES}
LOGS = DATA / "logs"
# Engines vLLM refused to start (bench/gpu/logs/<tag>.log.gz: "Available KV cache memory:
# -0.26 GiB"), which the planner must refuse too: model, GPU, utilization, maxModelLen, mnbt.
REFUSED: tuple[tuple[str, str, str, float, int, int, Quantization], ...] = (
    ("h100-70b-fp8", "llama-3.1-70b", "NVIDIA H100 80GB HBM3", 0.9, 8192, 16384, "fp8"),
    (
        "h100-70b-fp8-l4096",
        "llama-3.1-70b",
        "NVIDIA H100 80GB HBM3",
        0.9,
        4096,
        16384,
        "fp8",
    ),
    (
        "h100-70b-fp8-l2048",
        "llama-3.1-70b",
        "NVIDIA H100 80GB HBM3",
        0.9,
        2048,
        16384,
        "fp8",
    ),
)
PLOT = HERE / "plots" / "prediction.png"
OUTPUT = DATA / "calibration.json"

MODELS = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "qwen2.5-32b": "Qwen/Qwen2.5-32B",
}
GPUS = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA H200": "h200-141gb"}


def _cuda_gib(device: str) -> float | None:
    return DEFAULT_GPU_PROFILES[GPUS[device]].cuda_gib


def compiled_afresh(tag: str) -> bool | None:
    """Whether the engine's torch.compile ran in its start (its log), rather than loading an
    earlier start's cache: the compile's buffers count in vLLM's activation peak. None without
    a log."""
    # quant_drift.sh's logs carry the GPU in their name (h200-d-*, h200-q-*).
    found = [p for p in (LOGS / f"{tag}.log.gz", LOGS / f"h200-{tag}.log.gz") if p.is_file()]
    if not found:
        return None
    log = found[0]
    text = gzip.decompress(log.read_bytes()).decode(errors="replace")
    return "Directly load the compiled graph" not in text


def _gpu(device: str) -> tuple[Gpu, float]:
    profile = DEFAULT_GPU_PROFILES[GPUS[device]]
    assert profile.hbm_gbps
    assert profile.bf16_tflops
    assert profile.interconnect_gbps
    gpu = Gpu(
        profile.hbm_gbps,
        profile.bf16_tflops,
        profile.fp8_tflops,
        profile.interconnect_gbps,
    )
    return gpu, profile.memory_gib


def _checkpoint(model: str) -> CheckpointWeights | None:
    """The quantized checkpoint a bench/gpu/models config.json declares; None for 16 bits."""
    if model in MODELS:
        return None
    return checkpoint_weights(load_config_file(DATA / "models" / model / "config.json"))


def _arch(model: str) -> ModelArchitecture:
    """A catalog model by its folder's name on the GPU machine, or a shape of bench/gpu/models/
    (held-out shapes, checkpoint configs) from its config.json."""
    if model not in MODELS:
        config = load_config_file(DATA / "models" / model / "config.json")
        return architecture_from_config(config)
    arch = lookup_architecture(MODELS[model])
    assert arch is not None
    return arch


@dataclass(frozen=True)
class Engine:
    """One engine the GPU runs started: its configuration and vLLM's KV-cache figure."""

    tag: str
    model: str
    device: str
    utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    kv_tokens: int
    quantization: Quantization = "none"
    lora: LoraSettings | None = None
    tensor_parallel_size: int = 1
    kv_cache_dtype: KvCacheDtype = "auto"

    def weights(self) -> Quantization | Weights:
        """A pre-quantized checkpoint of bench/gpu/models as the planner reads its config.json
        (planner/weights.py), else the engine's --quantization (on load)."""
        found = _checkpoint(self.model)
        if found is None:
            return self.quantization
        form = found.format
        return Weights(
            form.spec_value or "none", form.kernel, form.description, "", checkpoint=found
        )

    def pod(self, efficiencies: Efficiencies = CALIBRATED) -> PodModel:
        return pod_model(
            _arch(self.model),
            dtype="bfloat16",
            quantization=self.weights(),
            tensor_parallel_size=self.tensor_parallel_size,
            gpu=_gpu(self.device)[0],
            max_num_batched_tokens=self.max_num_batched_tokens,
            efficiencies=efficiencies,
            kv_cache_dtype=self.kv_cache_dtype,
        )

    def planner_kv_tokens(self) -> int:
        """The planner's KV tokens for an engine that compiles afresh (what plans use)."""
        return self.planner_fit().kv_tokens

    def planner_kv_tokens_compile_cached(self) -> int:
        """The planner's KV tokens for an engine that loads its compile cache."""
        return self.planner_fit().kv_tokens_compile_cached

    def kernel(self) -> str:
        weights = self.weights()
        return weights.kernel if isinstance(weights, Weights) else typed("bfloat16", weights).kernel

    def planner_fit(self) -> GpuFit:
        return fit_on_gpu(
            _arch(self.model),
            dtype="bfloat16",
            kv_cache_dtype=self.kv_cache_dtype,
            quantization=self.weights(),
            memory_gib=_gpu(self.device)[1],
            cuda_gib=_cuda_gib(self.device),
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.utilization,
            max_num_batched_tokens=self.max_num_batched_tokens,
            tensor_parallel_size=self.tensor_parallel_size,
            lora_gib=buffer_gib(_arch(self.model), self.lora, self.tensor_parallel_size),
        )


@dataclass(frozen=True)
class Point:
    """A measured figure and what the model must predict it from."""

    engine: Engine
    what: str  # itl_ms | out_tok_s | prefill_s | ttft_ms
    concurrency: int
    prompt: int
    output: int
    measured: float

    def predict(self, efficiencies: Efficiencies = CALIBRATED) -> float:
        pod = self.engine.pod(efficiencies)
        c, p, o = self.concurrency, self.prompt, self.output
        if self.what == "itl_ms":
            return pod.itl_s(c, p, o) * 1e3
        if self.what == "out_tok_s":
            return pod.output_tokens_per_s(c, p, o)
        if self.what == "prefill_s":
            return pod.prefill_s(c, p)
        return pod.ttft_s(p) * 1e3

    def error_pct(self, efficiencies: Efficiencies = CALIBRATED) -> float:
        return (self.predict(efficiencies) / self.measured - 1) * 100

    def label(self) -> str:
        gpu = "H200" if "H200" in self.engine.device else "H100"
        model = self.engine.model
        if self.engine.quantization != "none":
            model += f" {self.engine.quantization}"
        return f"{gpu} {model} c{self.concurrency} {self.prompt}/{self.output} {self.what}"


def calibration_points() -> list[Point]:
    ref = json.loads(REFERENCE.read_text())
    device = ref["machine"]["gpu"]
    sweep = ref["sweep"]
    engine = Engine("reference-sweep", "llama-3.1-8b", device, 0.9, 8192, 16384, sweep["kv_tokens"])
    points = []
    for row in sweep["rows"]:
        c, p, o = row["batch"], row["in"], row["out"]
        points.append(Point(engine, "itl_ms", c, p, o, row["step_ms"]))
        points.append(Point(engine, "prefill_s", c, p, o, row["prefill_s"]))
    for run in ref["runs"]:
        if run.get("ttft_b1_ms") and run.get("max_num_batched_tokens", 16384) == 16384:
            points.append(Point(engine, "ttft_ms", 1, 512, 1, run["ttft_b1_ms"]))
    return points


def _records(runs: tuple[str, ...] = RUNS) -> list[dict[str, Any]]:
    rows = []
    for name in runs:
        rows += [
            json.loads(line)
            for line in (DATA / name).read_text().splitlines()
            if line.startswith("{")
        ]
    return rows


def engines(runs: tuple[str, ...] = RUNS) -> dict[str, Engine]:
    found = {}
    for r in _records(runs):
        if r["kind"] == "engine":
            args = r["engine_args"]
            found[r["tag"]] = Engine(
                r["tag"],
                r["model"],
                r["gpu"],
                args["gpu_memory_utilization"],
                args["max_model_len"],
                r["max_num_batched_tokens"],
                r["kv_tokens"],
                args.get("quantization") or "none",
                tensor_parallel_size=args.get("tensor_parallel_size") or 1,
                kv_cache_dtype=args.get("kv_cache_dtype") or "auto",
            )
    return found


def validation_points(runs: tuple[str, ...] = RUNS) -> list[Point]:
    """Every measured point of `runs` (those left out of the fits, by default)."""
    known = engines(runs)
    points = []
    for r in _records(runs):
        engine = known.get(r["tag"])
        if r["kind"] == "point" and engine:
            c, p, o = r["concurrency"], r["in"], r["out"]
            points.append(Point(engine, "itl_ms", c, p, o, r["itl_ms"]))
            points.append(Point(engine, "out_tok_s", c, p, o, r["out_tok_s"]))
        elif r["kind"] == "ttft" and engine:
            points.append(Point(engine, "ttft_ms", 1, r["in"], 1, r["ttft_ms"]))
        elif r["kind"] == "saturate" and r["sampling"] == "greedy" and engine:
            # Fewer requests than max_num_seqs run all at once (four_gpu.sh's 2,048/128 runs).
            c = min(r["nreq"], r["max_num_seqs"])
            points.append(Point(engine, "out_tok_s", c, r["in"], r["out"], r["out_tok_s"]))
    return points


def heldout_points(fitted: bool = False) -> list[Point]:
    """The new shapes' points (HELDOUT_RUNS): those of FIT_TAGS' engines when `fitted`, else
    every other engine's (the held-out ones)."""
    return [
        p
        for p in validation_points(HELDOUT_RUNS)
        if p.engine.model in HELDOUT_SHAPES and (p.engine.tag in FIT_TAGS) == fitted
    ]


def bf16_fit_points() -> list[Point]:
    return calibration_points() + heldout_points(fitted=True)


def checkpoint_points() -> list[Point]:
    """The FP8 checkpoint's and the fp8 KV cache's engines (q42-*): not in any fit, and the
    checkpoint's kernel (w8a8, per-channel weights, per-token activations) never measured
    before."""
    return [p for p in validation_points(HELDOUT_RUNS) if p.engine.tag.startswith("q42-")]


def w4a16_points() -> list[Point]:
    """Qwen2.5-7B-Instruct's AWQ and GPTQ-Int4 engines (quant_drift.sh quant): not in any fit."""
    return [
        p
        for p in validation_points(QUANT_DRIFT_RUNS)
        if p.engine.tag.startswith("q-") and not p.engine.tag.endswith(NOT_W4A16)
    ]


def mxfp4_points() -> list[Point]:
    """gpt-oss-20b's and -120b's warm engines (MXFP4 experts): the batch-1 steps fit
    MXFP4_LAYER_OVERHEAD_US (mxfp4_fit_points), the rest check it."""
    return [p for p in validation_points(MXFP4_RUNS) if measured(p)]


def mxfp4_fit_points() -> list[Point]:
    return [p for p in mxfp4_points() if is_fitted(p)]


def w4a16_fit_points() -> list[Point]:
    """The AWQ engine of quant_drift.sh w4 (decode steps at 1-256 sequences beside the same shape
    in 16 bits): what WEIGHT_ONLY_MEMORY_EFFICIENCY is fitted to. The q-* engines check it."""
    return [
        p
        for p in validation_points(QUANT_DRIFT_RUNS)
        if p.engine.tag == "w4-qwen2.5-7b-awq" and p.what == "itl_ms"
    ]


def _kv_engines() -> list[Engine]:
    runs = RUNS + FP8_CALIBRATION_RUNS + EDGE_RUNS + HELDOUT_RUNS + QUANT_DRIFT_RUNS
    return [e for e in engines(runs).values() if not e.tag.endswith(NOT_W4A16)]


def two_gpu_choices() -> list[dict[str, Any]]:
    """For each new shape on 2 x H200, the planner's layout against the measured winner by
    greedy saturation output tok/s per GPU (512/256; TP1 engines averaged)."""
    import yaml

    from llmfleet.models import LLMDeploymentSpec
    from llmfleet.planner.planning import plan

    saturation: dict[tuple[str, int], list[float]] = {}
    known = engines(HELDOUT_RUNS)
    for r in _records(HELDOUT_RUNS):
        engine = known.get(r["tag"])
        if r["kind"] == "saturate" and r["sampling"] == "greedy" and r["in"] == 512 and engine:
            key = (engine.model, engine.tensor_parallel_size)
            if engine.utilization == 0.9:
                saturation.setdefault(key, []).append(r["out_tok_s"] / key[1])
    found = []
    for shape, path in TWO_GPU_PLANS.items():
        spec = LLMDeploymentSpec.model_validate(yaml.safe_load(path.read_text())["spec"])
        config = load_config_file(DATA / "models" / shape / "config.json")
        planned = plan(spec, model_config=config).tensor_parallel_size
        measured = {tp: statistics.mean(saturation[(shape, tp)]) for tp in (1, 2)}
        winner = max(measured, key=lambda tp: measured[tp])
        found.append(
            {
                "shape": shape,
                "planned_tp": planned,
                "measured_tp": winner,
                "measured_per_gpu": measured,
            }
        )
    return found


def _loss(points: list[Point], e: Efficiencies) -> float:
    return sum(math.log(p.predict(e) / p.measured) ** 2 for p in points)


def fp8_calibration_points() -> list[Point]:
    return validation_points(FP8_CALIBRATION_RUNS)


BF16_FITTED = (
    "memory",
    "compute",
    "step_overhead_ms",
    "layer_overhead_us",
    "sequence_layer_overhead_us",
    "tp_layer_overhead_us",
)
FP8_FITTED = ("fp8_compute", "fp8_layer_overhead_us")


def fit(points: list[Point], names: tuple[str, ...] = BF16_FITTED) -> Efficiencies:
    """Nelder-Mead over the fitted efficiencies `names`, the others held at the planner's
    (log space keeps them positive)."""
    # A constant fitted to zero restarts from a small value (log space).
    start = [math.log(max(getattr(CALIBRATED, n), 1e-3)) for n in names]

    def make(x: list[float]) -> Efficiencies:
        return replace(CALIBRATED, **{n: math.exp(v) for n, v in zip(names, x, strict=True)})

    def f(x: list[float]) -> float:
        return _loss(points, make(x))

    simplex: list[list[float]] = [start] + [
        [v + (0.2 if i == j else 0) for j, v in enumerate(start)] for i in range(len(start))
    ]
    for _ in range(400):
        simplex.sort(key=f)
        best, worst = simplex[0], simplex[-1]
        centre = [sum(col) / (len(simplex) - 1) for col in zip(*simplex[:-1], strict=True)]
        reflected = [c + (c - w) for c, w in zip(centre, worst, strict=True)]
        if f(reflected) < f(best):
            expanded = [c + 2 * (c - w) for c, w in zip(centre, worst, strict=True)]
            simplex[-1] = expanded if f(expanded) < f(reflected) else reflected
        elif f(reflected) < f(simplex[-2]):
            simplex[-1] = reflected
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centre, worst, strict=True)]
            if f(contracted) < f(worst):
                simplex[-1] = contracted
            else:
                simplex = [best] + [
                    [b + 0.5 * (v - b) for b, v in zip(best, s, strict=True)] for s in simplex[1:]
                ]
    return make(min(simplex, key=f))


def engine_args_ratio() -> dict[str, float]:
    """The plan's engine arguments (512 sequences for the 512/256 workload on an H100) against
    the best of vLLM's defaults and --max-num-seqs 256: same workload, same GPU, same session."""
    sat = {
        r["tag"]: r["out_tok_s"]
        for r in _records()
        if r["kind"] == "saturate" and r["sampling"] == "top_p" and r["in"] == 512
    }
    baseline = max(sat["plan-8b"], sat["default-8b"])  # plan-8b ran --max-num-seqs 256
    return {
        "plan": sat["seqs512-8b"],
        "max_num_seqs_256": sat["plan-8b"],
        "vllm_defaults": sat["default-8b"],
        "ratio": sat["seqs512-8b"] / baseline,
    }


def _plot(points: list[Point]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    for ax, what, unit in zip(
        axes,
        ("out_tok_s", "itl_ms", "ttft_ms"),
        ("output tokens/s", "ITL, ms", "TTFT, ms"),
        strict=True,
    ):
        chosen = [p for p in points if p.what == what]
        for device, quant, marker in (
            ("H100", "none", "o"),
            ("H200", "none", "s"),
            ("H100", "fp8", "^"),
        ):
            mine = [
                p for p in chosen if device in p.engine.device and p.engine.quantization == quant
            ]
            if not mine:
                continue
            name = device if quant == "none" else f"{device} 70B {quant}"
            ax.scatter(
                [p.measured for p in mine],
                [p.predict() for p in mine],
                marker=marker,
                label=f"{name} ({len(mine)})",
            )
        values = [p.measured for p in chosen] + [p.predict() for p in chosen]
        low, high = min(values) * 0.8, max(values) * 1.25
        ax.plot([low, high], [low, high], color="grey", lw=0.8)
        ax.fill_between(
            [low, high],
            [low * 0.85, high * 0.85],
            [low * 1.15, high * 1.15],
            color="grey",
            alpha=0.15,
            label="±15 %",
        )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel=f"measured {unit}",
            ylabel=f"predicted {unit}",
            title=unit,
        )
        ax.legend(fontsize=8)
    fig.suptitle(
        "Planner performance model vs vLLM 0.26.0, points not used for calibration "
        "(bf16 2026-11-23; H100 70B fp8 2026-11-24)"
    )
    fig.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def refusals() -> list[dict[str, Any]]:
    """The planner's KV cache for the engines vLLM refused (0: the planner refuses too)."""
    found = []
    for tag, model, device, utilization, length, mnbt, quantization in REFUSED:
        engine = Engine(tag, model, device, utilization, length, mnbt, 0, quantization)
        found.append({"tag": tag, "gpu": device, "planner": engine.planner_kv_tokens()})
    return found


def _kv_check_engine(r: dict[str, Any]) -> Engine:
    """An Engine from a kv_check.py line (no `kind` or `model` keys: the model is the folder)."""
    args = r["engine_args"]
    lora = None
    if args.get("enable_lora"):
        max_loras = args.get("max_loras", 1)  # vLLM's defaults
        lora = LoraSettings(max_loras, args.get("max_lora_rank", 16), max_loras)
    return Engine(
        r["tag"],
        Path(args["model"]).name,
        r["gpu"],
        args["gpu_memory_utilization"],
        args["max_model_len"],
        r["max_num_batched_tokens"],
        r["kv_tokens"],
        lora=lora,
    )


def lora_kv(runs: tuple[str, ...] = LORA_RUNS) -> list[dict[str, Any]]:
    """Each LoRA engine against the engine without LoRA of its run: the KV cache vLLM gave up
    (whole 16-token blocks, so +-2 MiB for Llama-3.1-8B) against the planner's buffers, and
    the planner's KV tokens against vLLM's."""
    found = []
    for name in runs:
        started = [_kv_check_engine(r) for r in _records((name,))]
        for e in started:
            if e.lora is None:
                continue
            (base,) = [
                b
                for b in started
                if b.lora is None
                and (b.model, b.device, b.utilization, b.max_model_len)
                == (e.model, e.device, e.utilization, e.max_model_len)
            ]
            arch = _arch(e.model)
            per_token = kv_bytes_per_token_per_gpu(arch, "bfloat16", 1)
            measured = (base.kv_tokens - e.kv_tokens) * per_token
            planner = gpu_buffer_bytes(arch, e.lora, 1)
            planned_kv = e.planner_kv_tokens()
            found.append(
                {
                    "tag": e.tag,
                    "gpu": e.device,
                    "model": e.model,
                    "max_loras": e.lora.max_adapters,
                    "max_lora_rank": e.lora.max_rank,
                    "vllm_kv_tokens_without": base.kv_tokens,
                    "planner_kv_tokens_without": base.planner_kv_tokens(),
                    "vllm_kv_tokens": e.kv_tokens,
                    "planner_kv_tokens": planned_kv,
                    "kv_error_pct": round((planned_kv / e.kv_tokens - 1) * 100, 3),
                    "measured_reserve_bytes": measured,
                    "planner_reserve_bytes": planner,
                    "reserve_error_pct": round((planner / measured - 1) * 100, 3),
                }
            )
    return found


def _report(points: list[Point]) -> list[dict[str, Any]]:
    return [
        {
            "point": p.label(),
            "measured": p.measured,
            "predicted": round(p.predict(), 3),
            "error_pct": round(p.error_pct(), 1),
        }
        for p in points
    ]


def w4a16_figures(kv: list[dict[str, Any]]) -> dict[str, float]:
    """The planner against the AWQ and GPTQ-Int4 engines: speed (w4a16_points) and KV tokens."""
    points = w4a16_points()

    def worst(what: str, concurrency: int | None = None) -> float:
        return max(
            abs(p.error_pct())
            for p in points
            if p.what == what and concurrency in (None, p.concurrency)
        )

    return {
        "gpu_w4a16_tok_s_error_max_pct": worst("out_tok_s"),
        "gpu_w4a16_itl_b1_error_pct": worst("itl_ms", 1),
        "gpu_w4a16_itl_error_max_pct": worst("itl_ms"),
        "gpu_w4a16_ttft_error_max_pct": worst("ttft_ms"),
        "gpu_w4a16_kv_error_max_pct": max(
            abs(k["start_error_pct"]) for k in kv if k["kernel"] == "w4a16" and not k["mxfp4"]
        ),
    }


def run() -> dict[str, float]:
    validation = validation_points()
    errors = [abs(p.error_pct()) for p in validation if p.what in ("out_tok_s", "itl_ms")]
    fp8 = [p for p in validation if p.engine.quantization == "fp8"]
    fp8_errors = [abs(p.error_pct()) for p in fp8 if p.what in ("out_tok_s", "itl_ms")]
    kv = []
    for e in _kv_engines():
        # A hybrid model's blocks are not its tokens (gpu_mxfp4.py): vLLM's logged figure.
        vllm_tokens = reported_kv_tokens(e.tag) if is_mxfp4(e.tag) else e.kv_tokens
        planned = e.planner_kv_tokens()
        cached = e.planner_kv_tokens_compile_cached()
        afresh = compiled_afresh(e.tag)
        kv.append(
            {
                "tag": e.tag,
                "gpu": e.device,
                "model": e.model,
                "quantization": e.quantization,
                "checkpoint": _checkpoint(e.model) is not None,
                "mxfp4": is_mxfp4(e.tag),
                "kv_cache_dtype": e.kv_cache_dtype,
                "tensor_parallel_size": e.tensor_parallel_size,
                "utilization": e.utilization,
                "max_model_len": e.max_model_len,
                "kernel": e.kernel(),
                "compiled_afresh": afresh,
                "planner": planned,
                "planner_compile_cached": cached,
                "vllm": vllm_tokens,
                # Against the fresh compile's figure, which plans are made by.
                "error_pct": round((planned / vllm_tokens - 1) * 100, 2),
                # Against the figure for how this engine started: the compile-cached one for an
                # engine whose log says it loaded the cache.
                "start_error_pct": round(
                    ((cached if afresh is False else planned) / vllm_tokens - 1) * 100, 2
                ),
            }
        )
    args = engine_args_ratio()
    lora = lora_kv()
    held = heldout_points()
    held_tok_s = [abs(p.error_pct()) for p in held if p.what == "out_tok_s"]
    held_b1 = [abs(p.error_pct()) for p in held if p.what == "itl_ms" and p.concurrency == 1]
    held_kv = [k for k in kv if k["model"] in HELDOUT_SHAPES]
    choices = two_gpu_choices()
    report = {
        "efficiencies": CALIBRATED.__dict__,
        "calibration_loss": _loss(bf16_fit_points(), CALIBRATED),
        "fp8_calibration_loss": _loss(fp8_calibration_points(), CALIBRATED),
        "kv": kv,
        "refused_by_vllm": refusals(),
        "lora": lora,
        "engine_args": args,
        "validation": _report(validation),
        "fp8_calibration": _report(fp8_calibration_points()),
        "heldout": _report(held),
        "heldout_fitted": _report(heldout_points(fitted=True)),
        "checkpoint_and_kv_dtype": _report(checkpoint_points()),
        "w4a16_fit": {
            "weight_only_memory": round(
                fit(w4a16_fit_points(), ("weight_only_memory",)).weight_only_memory, 3
            ),
            "points": _report(w4a16_fit_points()),
        },
        "w4a16": _report(w4a16_points()),
        "mxfp4": {
            "memory": memory_rows(e for e in _kv_engines() if is_mxfp4(e.tag)),
            "mxfp4_layer_overhead_us": round(
                fit(mxfp4_fit_points(), MXFP4_FITTED).mxfp4_layer_overhead_us, 1
            ),
            "fitted_to_one_model": {
                m: round(e.mxfp4_layer_overhead_us, 1) for m, e, _ in cross_fit(mxfp4_points(), fit)
            },
            "points": _report(mxfp4_points()),
        },
        "two_gpu_choices": choices,
        "source": (
            "vLLM 0.26.0 on NVIDIA H100 80GB HBM3 and NVIDIA H200, 2026-11-23 (bf16) and "
            "2026-11-24 (Llama-3.1-70B fp8), 2026-11-25 (LoRA, H100), 2026-11-27 (new dense "
            "shapes, 2 x H200; fresh against cached torch.compile, AWQ and GPTQ-Int4, "
            "gpt-oss-20b in MXFP4, 1 x H200), 2026-11-28 (gpt-oss-20b and -120b warm, 1 x H200) "
            "(bench/gpu/)"
        ),
    }
    OUTPUT.write_text(json.dumps(report, indent=2) + "\n")
    _plot(validation)
    return {
        "gpu_kv_error_max_pct": max(
            abs(k["error_pct"])
            for k in kv
            if k["quantization"] == "none"
            and k["model"] not in HELDOUT_SHAPES
            and not k["checkpoint"]
            and k["kv_cache_dtype"] == "auto"
        ),
        # Issue 42: Llama-3.1-8B's shape as a compressed-tensors FP8 checkpoint (sized from its
        # config.json's quantization_config), and in bf16 with --kv-cache-dtype fp8.
        "gpu_quantized_checkpoint_kv_error_max_pct": max(
            abs(k["start_error_pct"]) for k in kv if k["checkpoint"] and not k["mxfp4"]
        ),
        "gpu_kv_cache_fp8_error_pct": max(
            abs(k["error_pct"]) for k in kv if k["kv_cache_dtype"].startswith("fp8")
        ),
        # A new pod compiles afresh; an engine that loaded an earlier start's compile cache
        # peaks lower with w8a8 weights, which the planner's compile-cached figure models.
        "gpu_kv_fp8_error_max_pct": max(
            abs(k["error_pct"])
            for k in kv
            if k["quantization"] == "fp8" and k["compiled_afresh"] is not False
        ),
        "gpu_kv_fp8_cached_compile_error_pct": max(
            abs(k["start_error_pct"])
            for k in kv
            if k["kernel"] == "w8a8" and k["compiled_afresh"] is False
        ),
        "gpu_kv_cached_compile_engines": float(sum(1 for k in kv if k["compiled_afresh"] is False)),
        "gpu_kv_cached_compile_error_max_pct": max(
            abs(k["start_error_pct"]) for k in kv if k["compiled_afresh"] is False
        ),
        **w4a16_figures(kv),
        **mxfp4_figures(_kv_engines(), mxfp4_points(), fit),
        **edge_figures(kv),
        "gpu_lora_reserve_error_pct": abs(
            next(
                r["reserve_error_pct"]
                for r in lora
                if (r["max_loras"], r["max_lora_rank"]) == (4, 16)
            )
        ),
        "gpu_lora_kv_error_max_pct": max(abs(r["kv_error_pct"]) for r in lora),
        "gpu_engine_args_throughput_ratio": args["ratio"],
        "gpu_prediction_error_p50_pct": statistics.median(errors),
        "gpu_prediction_error_max_pct": max(errors),
        "gpu_prediction_points": float(len(errors)),
        "gpu_fp8_prediction_error_p50_pct": statistics.median(fp8_errors),
        "gpu_fp8_prediction_error_max_pct": max(fp8_errors),
        "gpu_heldout_tok_s_error_p50_pct": statistics.median(held_tok_s),
        "gpu_heldout_tok_s_error_max_pct": max(held_tok_s),
        "gpu_heldout_itl_b1_error_max_pct": max(held_b1),
        "gpu_heldout_kv_error_max_pct": max(abs(k["error_pct"]) for k in held_kv),
        "gpu_two_gpu_choice_agrees": float(
            all(c["planned_tp"] == c["measured_tp"] for c in choices)
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fit", action="store_true", help="fit the efficiencies and print them")
    p.add_argument("--fit-fp8", action="store_true", help="fit the fp8 constants, print them")
    p.add_argument("--fit-mxfp4", action="store_true", help="fit the MXFP4 constant, print it")
    args = p.parse_args()
    if args.fit or args.fit_fp8 or args.fit_mxfp4:
        if args.fit_mxfp4:
            fitted = fit(mxfp4_fit_points(), MXFP4_FITTED)
            points = mxfp4_points()
        elif args.fit:
            points = bf16_fit_points()
            fitted = fit(points)
            points = points + heldout_points()
        else:
            points = fp8_calibration_points()
            fitted = fit(points, FP8_FITTED)
            held_out = [q for q in validation_points() if q.engine.quantization == "fp8"]
            points = points + held_out
        print(fitted)
        for point in points:
            print(f"  {point.label():45s} {point.measured:10.3f} {point.error_pct(fitted):+6.1f} %")
        return
    figures = run()
    print(json.dumps(figures, indent=2))
    print(json.dumps(edge_report(), indent=2))
    report = json.loads(OUTPUT.read_text())
    for v in report["validation"] + report["fp8_calibration"] + report["heldout"]:
        print(
            f"  {v['point']:45s} {v['measured']:10.3f} {v['predicted']:10.3f} "
            f"{v['error_pct']:+6.1f} %"
        )


if __name__ == "__main__":
    main()
