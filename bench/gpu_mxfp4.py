"""gpt-oss-20b (MXFP4 experts) on one H200, vLLM 0.26.0, dummy weights, 2026-11-27
(`bash bench/gpu/quant_drift.sh gptoss`; lines tagged g-gpt-oss-20b-* in
bench/gpu/h200-2026-11-27-quant-drift.jsonl, logs bench/gpu/logs/h200-g-*.log.gz): the planner's
weights and KV tokens against what vLLM logged, and its speed against the measured points.

vLLM picked the TRITON MoE backend (OAITritonMxfp4ExpertsMonolithic), the one the planner sizes.
No figure here enters a fit. gpu_model.py passes its engines and points in and records the
figures.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.gpu_model import Engine, Point

LOGS = Path(__file__).resolve().parent / "gpu" / "logs"
TAG_PREFIX = "g-gpt-oss"
BACKEND = "Using 'TRITON' Mxfp4 MoE backend"
# measure.py's kv_tokens is num_gpu_blocks x block_size, which for a hybrid (sliding + full
# attention) model counts blocks the sliding layers hold, not tokens a sequence can use: vLLM's
# own "GPU KV cache size" is the figure to compare (as gpu_edges.py does for Gemma).
KV_PATTERN = r"GPU KV cache size: ([\d,]+) tokens"
WEIGHTS_PATTERN = r"Model loading took ([\d.]+) GiB"


def is_mxfp4(tag: str) -> bool:
    return tag.startswith(TAG_PREFIX)


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


def figures(engines: Iterable[Engine], points: Iterable[Point]) -> dict[str, float]:
    """Signed errors would hide the direction in a max; these are the largest |planner /
    measured - 1| in % (the report in calibration.json has the signs: the planner errs high)."""
    rows = memory_rows(e for e in engines if is_mxfp4(e.tag))
    mine = [p for p in points if is_mxfp4(p.engine.tag)]

    def worst(what: str) -> float:
        return max(abs(p.error_pct()) for p in mine if p.what == what)

    return {
        "gpu_mxfp4_weights_error_pct": max(abs(r["weights_error_pct"]) for r in rows),
        "gpu_mxfp4_kv_error_max_pct": max(abs(r["kv_error_pct"]) for r in rows),
        "gpu_mxfp4_itl_error_max_pct": worst("itl_ms"),
        "gpu_mxfp4_tok_s_error_max_pct": worst("out_tok_s"),
        "gpu_mxfp4_ttft_error_max_pct": worst("ttft_ms"),
    }
