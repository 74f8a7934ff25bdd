"""An engine that loads an earlier start's torch.compile cache (spec.engine.compileCache keeps it
for every pod after the first) peaks lower with w8a8 weights and gets more KV cache. The plan
carries both figures (vLLM 0.26.0's KV tokens of each start, bench/gpu/logs: h100-70b-fp8-u095,
h200-70b-fp8 and -b, h200-d-8b-fp8-load-*-cold/-warm, h200-gpulab-triton-8b-cache-0/1), and
PlanVerified accepts an engine near either."""

from __future__ import annotations

import pytest

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.planner.planning import plan
from llmfleet.reconcile.llmdeployment.plan_verified import plan_verified

L70 = "meta-llama/Llama-3.1-70B-Instruct"
L8 = "meta-llama/Llama-3.1-8B-Instruct"


def _spec(
    model: str, quantization: str, profile: str, utilization: float, length: int, batched: int
) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": model, "quantization": quantization},
            "gpus": {"count": 1, "profile": profile},
            "engine": {
                "gpuMemoryUtilization": utilization,
                "maxModelLen": length,
                "maxNumBatchedTokens": batched,
            },
        }
    )


@pytest.mark.parametrize(
    ("spec", "fresh", "cached"),
    [
        # vLLM's "GPU KV cache size" of the start that compiled and of the one that loaded it.
        pytest.param(
            _spec(L8, "fp8", "h200-141gb", 0.9, 4096, 16384), 944_288, 946_848, id="8b-fp8-16k"
        ),
        pytest.param(
            _spec(L8, "fp8", "h200-141gb", 0.9, 4096, 8192), 949_584, 952_864, id="8b-fp8-8k"
        ),
        pytest.param(
            _spec(L70, "fp8", "h200-141gb", 0.9, 8192, 16384), 177_936, 179_792, id="70b-fp8-h200"
        ),
        # The engine that found its cache fitted where compiling afresh leaves 13 % less.
        pytest.param(
            _spec(L70, "fp8", "h100-80gb", 0.95, 8192, 16384), None, 14_016, id="70b-fp8-h100-tight"
        ),
        pytest.param(
            _spec(L8, "none", "h200-141gb", 0.9, 8192, 16384), 891_392, 891_872, id="8b-bf16"
        ),
    ],
)
def test_plan_holds_both_starts_kv_cache_within_half_a_percent(
    spec: LLMDeploymentSpec, fresh: int | None, cached: int
) -> None:
    p = plan(spec)
    assert p.kv_cache_tokens_compile_cached is not None
    assert p.kv_cache_tokens_compile_cached == pytest.approx(cached, rel=0.005)
    if fresh is not None:
        assert p.kv_cache_tokens_per_replica == pytest.approx(fresh, rel=0.005)
    # Sequences are planned by the fresh compile's figure: never the larger one.
    assert p.kv_cache_tokens_per_replica <= p.kv_cache_tokens_compile_cached


@pytest.mark.parametrize(
    ("quantization", "differs"),
    [
        pytest.param("fp8", True, id="w8a8-peaks-lower"),
        pytest.param("none", False, id="sixteen-bit-same-peak"),
    ],
)
def test_the_explanation_names_the_compile_cached_figure_only_where_it_differs(
    quantization: str, differs: bool
) -> None:
    p = plan(_spec(L8, quantization, "h200-141gb", 0.9, 8192, 16384))
    assert ("when the engine finds its compile cache" in p.reason) is differs
    if differs:
        assert f"{p.kv_cache_tokens_compile_cached:,} tokens" in p.reason
    else:
        assert p.kv_cache_tokens_compile_cached == p.kv_cache_tokens_per_replica


def test_status_plan_publishes_the_compile_cached_figure() -> None:
    p = plan(_spec(L70, "fp8", "h100-80gb", 0.95, 8192, 16384))
    summary = p.summary().model_dump(by_alias=True)
    assert summary["kvCacheTokensCompileCached"] == p.kv_cache_tokens_compile_cached


@pytest.mark.parametrize(
    ("measured", "status", "named"),
    [
        # Planned 12,144 compiling afresh and 13,984 with the cache (70B fp8, H100 at 0.95).
        pytest.param(14_016, "True", "loads its compile cache", id="cached-engine-verified"),
        pytest.param(12_100, "True", "compiling afresh", id="fresh-engine-verified"),
        pytest.param(16_000, "False", "loads its compile cache", id="above-both-differs"),
        pytest.param(10_000, "False", "compiling afresh", id="below-both-differs"),
    ],
)
def test_plan_verified_accepts_either_figure_and_says_which(
    measured: int, status: str, named: str
) -> None:
    c = plan_verified(measured, 12_144, 1, compile_cached=13_984)
    assert c.status == status
    assert named in c.message


def test_plan_verified_without_a_second_figure_speaks_of_one() -> None:
    c = plan_verified(14_016, 12_144, 1)
    assert c.status == "False"
    assert "compile cache" not in c.message
