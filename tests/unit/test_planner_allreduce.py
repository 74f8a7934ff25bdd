"""The all-reduce model against the published latency tables it is fitted to, and the whole
model against published tensor-parallel vLLM results (bench/tp_published.py)."""

from __future__ import annotations

import importlib
import statistics
from pathlib import Path
from types import ModuleType

import pytest

from llmfleet.planner.allreduce import allreduce_s, custom_allreduce_max_bytes

REPO = Path(__file__).resolve().parents[2]
NVLINK_GBPS = 450
KIB, MIB = 1024, 1024**2


def bench_module(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module(f"bench.{name}")


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_fitted_allreduce_follows_the_published_table(
    monkeypatch: pytest.MonkeyPatch, gpu: str, tp: int
) -> None:
    fit = bench_module(monkeypatch, "allreduce_fit")
    errors = [abs(e) for s, e in fit.errors_pct(fit.load((gpu,))) if s.tp == tp]
    assert len(errors) >= 15
    assert statistics.median(errors) <= 10
    assert max(errors) <= 30


def test_fitted_constants_are_what_a_fresh_fit_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    fit = bench_module(monkeypatch, "allreduce_fit")
    assert fit.stale_constants(fit.load()) == {}


@pytest.mark.parametrize(
    ("tp", "small", "large"),
    [(2, 4 * MIB, 16 * MIB), (4, 4 * MIB, 16 * MIB), (8, 128 * KIB, 512 * KIB)],
)
def test_messages_past_vllms_custom_limit_pay_nccls_higher_floor(
    tp: int, small: int, large: int
) -> None:
    assert small < custom_allreduce_max_bytes(tp) <= large
    tiny = allreduce_s(16, tp, NVLINK_GBPS)
    assert 3e-6 < tiny < 6e-6  # the custom kernel's few microseconds
    assert allreduce_s(small, tp, NVLINK_GBPS) < allreduce_s(large, tp, NVLINK_GBPS)
    assert allreduce_s(large, tp, NVLINK_GBPS) > 15e-6


def test_one_gpu_has_no_allreduce() -> None:
    assert allreduce_s(64 * MIB, 1, NVLINK_GBPS) == 0


def test_planner_meets_the_published_tensor_parallel_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figures = bench_module(monkeypatch, "tp_published").figures()
    assert figures["published_tp_error_p50_pct"] <= 15
    assert figures["published_tp_error_max_pct"] <= 30
    assert figures["published_tp_ranking_agrees"] == 1
