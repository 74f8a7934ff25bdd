"""gpt-oss's MXFP4 experts on one H200, vLLM 0.26.0, dummy weights: the planner's weights and
KV tokens against what vLLM logged, and its speed against the measured points.

Memory: gpt-oss-20b of 2026-11-27 (`bash bench/gpu/quant_drift.sh gptoss`; lines tagged
g-gpt-oss-20b-* in bench/gpu/h200-2026-11-27-quant-drift.jsonl, logs bench/gpu/logs/h200-g-*).
Speed: gpt-oss-20b and -120b of 2026-11-28, every point warmed once untimed (gw-*) and also the
fastest of three (gm-*): bench/gpu/h200-2026-11-28-gptoss-warm.jsonl, logs h200-gw-*, h200-gm-*.
The earlier cold speed points held Triton JIT compiles, so they no longer judge the model.

vLLM picked the TRITON MoE backend (OAITritonMxfp4ExpertsMonolithic), the one the planner sizes.
One constant is fitted here (MXFP4_LAYER_OVERHEAD_US, to both models' batch-1 steps); the rest
checks it. gpu_model.py passes its engines, points and fit in and records the figures.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmfleet.planner.efficiencies import CALIBRATED, Efficiencies

if TYPE_CHECKING:
    from bench.gpu_model import Engine, Point

LOGS = Path(__file__).resolve().parent / "gpu" / "logs"
TAG_PREFIX = "g-gpt-oss"
WARM_RUNS = ("h200-2026-11-28-gptoss-warm.jsonl",)
WARM_PREFIXES = ("gw-gpt-oss", "gm-gpt-oss")
FITTED = ("mxfp4_layer_overhead_us",)
# From this batch up, one point measured up to 2.9x apart across warm engines (gpu/README.md).
SPREAD_FROM = 8
BACKEND = "Using 'TRITON' Mxfp4 MoE backend"
# measure.py's kv_tokens is num_gpu_blocks x block_size, which for a hybrid (sliding + full
# attention) model counts blocks the sliding layers hold, not tokens a sequence can use: vLLM's
# own "GPU KV cache size" is the figure to compare (as gpu_edges.py does for Gemma).
KV_PATTERN = r"GPU KV cache size: ([\d,]+) tokens"
WEIGHTS_PATTERN = r"Model loading took ([\d.]+) GiB"


def is_mxfp4(tag: str) -> bool:
    return tag.startswith((TAG_PREFIX, *WARM_PREFIXES))


def measured(point: Point) -> bool:
    """measure.py's ITL is (wall - prefill) / (O - 1) of two runs: a stall in the prefill run
    leaves it at or below zero, not a step (its output tok/s is the timed run's, and stands)."""
    return point.what != "itl_ms" or point.measured > 0


def is_fitted(point: Point) -> bool:
    return point.what == "itl_ms" and point.concurrency == 1


def model(point: Point) -> str:
    return point.engine.model


def _log(tag: str) -> str:
    return gzip.decompress((LOGS / f"h200-{tag}.log.gz").read_bytes()).decode(errors="replace")


def logged(tag: str, pattern: str) -> float:
    found = re.search(pattern, _log(tag))
    assert found, f"{tag}: no {pattern!r} in its log"
    return float(found.group(1).replace(",", ""))


def reported_kv_tokens(tag: str) -> int:
    """vLLM's "GPU KV cache size" for the engine `tag` (its log)."""
    return int(logged(tag, KV_PATTERN))


def _pct(planned: float, measured: float) -> float:
    return round((planned / measured - 1) * 100, 2)


def memory_rows(engines: Iterable[Engine]) -> list[dict[str, Any]]:
    rows = []
    for e in engines:
        assert BACKEND in _log(e.tag), f"{e.tag}: vLLM did not run the TRITON MXFP4 backend"
        fit = e.planner_fit()
        vllm_weights = logged(e.tag, WEIGHTS_PATTERN)
        vllm_kv = reported_kv_tokens(e.tag)
        rows.append(
            {
                "tag": e.tag,
                "max_model_len": e.max_model_len,
                "vllm_weights_gib": vllm_weights,
                "planner_weights_gib": fit.weights_gib,
                "weights_error_pct": _pct(fit.weights_gib, vllm_weights),
                "planner_reserve_gib": fit.reserve_gib,
                "vllm_kv_tokens": vllm_kv,
                "planner_kv_tokens": fit.kv_tokens,
                "kv_error_pct": _pct(fit.kv_tokens, vllm_kv),
            }
        )
    return rows


def _worst(points: Iterable[Point], efficiencies: Efficiencies = CALIBRATED) -> float:
    return round(max(abs(p.error_pct(efficiencies)) for p in points), 1)


def _held_out(p: Point) -> bool:
    """The points stable run to run that the constant was not fitted to: greedy saturation and
    batch-1 TTFT at 512 and 8,000 tokens."""
    saturation = p.what == "out_tok_s" and p.output > 64
    return saturation or (p.what == "ttft_ms" and p.prompt in (512, 8000))


def spread(points: Iterable[Point]) -> float:
    """The largest max / min of one ITL point (model, batch, prompt, output) across the warm
    engines, at batch SPREAD_FROM and above."""
    seen: dict[tuple[str, int, int, int], list[float]] = {}
    for p in points:
        if p.what == "itl_ms" and p.concurrency >= SPREAD_FROM and measured(p):
            seen.setdefault((model(p), p.concurrency, p.prompt, p.output), []).append(p.measured)
    return round(max(max(v) / min(v) for v in seen.values() if len(v) > 1), 2)


def cross_fit(
    points: list[Point], fit: Callable[[list[Point], tuple[str, ...]], Efficiencies]
) -> list[tuple[str, Efficiencies, list[Point]]]:
    """The constant fitted to one model's batch-1 steps, with the other model's to check it."""
    fitted = [p for p in points if is_fitted(p)]
    return [
        (m, fit([p for p in fitted if model(p) == m], FITTED), [p for p in fitted if model(p) != m])
        for m in sorted({model(p) for p in fitted})
    ]


def figures(
    engines: Iterable[Engine],
    points: Iterable[Point],
    fit: Callable[[list[Point], tuple[str, ...]], Efficiencies],
) -> dict[str, float]:
    """Signed errors would hide the direction in a max; these are the largest |planner /
    measured - 1| in % (the report in calibration.json has the signs)."""
    rows = memory_rows(e for e in engines if is_mxfp4(e.tag))
    mine = [p for p in points if is_mxfp4(p.engine.tag) and measured(p)]

    def worst(what: str) -> float:
        return _worst(p for p in mine if p.what == what)

    return {
        "gpu_mxfp4_weights_error_pct": max(abs(r["weights_error_pct"]) for r in rows),
        "gpu_mxfp4_kv_error_max_pct": max(abs(r["kv_error_pct"]) for r in rows),
        "gpu_mxfp4_itl_error_max_pct": worst("itl_ms"),
        "gpu_mxfp4_tok_s_error_max_pct": worst("out_tok_s"),
        "gpu_mxfp4_ttft_error_max_pct": worst("ttft_ms"),
        "gpu_mxfp4_itl_b1_error_max_pct": _worst(p for p in mine if is_fitted(p)),
        "gpu_mxfp4_itl_b1_crossfit_error_max_pct": max(
            _worst(others, fitted) for _, fitted, others in cross_fit(mine, fit)
        ),
        "gpu_mxfp4_heldout_error_max_pct": _worst(p for p in mine if _held_out(p)),
        "gpu_mxfp4_itl_spread_max_ratio": spread(mine),
    }
