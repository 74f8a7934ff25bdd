"""PlanVerified: the KV cache the engines report (vllm:cache_config_info) against the plan's."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.status import LLMDeploymentStatus, status_json
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment import kvcache
from llmfleet.reconcile.llmdeployment.kvcache import (
    EngineKVCache,
    parse_kv_cache_tokens,
    reporting_engines,
)
from llmfleet.reconcile.llmdeployment.plan_verified import newly_unverified, plan_verified
from llmfleet.reconcile.llmdeployment.status import Observed, invalid_status, ready_status

HELP = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
TYPE = "# TYPE vllm:cache_config_info gauge\n"


def info(**labels: object) -> str:
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"vllm:cache_config_info{{{body}}} 1.0\n"


# What vLLM's /metrics around the family looks like: other families before and after.
OTHER = (
    "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
)


@pytest.mark.parametrize(
    ("page", "tokens"),
    [
        pytest.param(
            OTHER
            + HELP
            + TYPE
            + info(block_size=16, kv_cache_size_tokens=2097152, num_gpu_blocks=131072)
            + OTHER.replace("waiting", "running"),
            2_097_152,
            id="kv-cache-size-tokens-label-wins",
        ),
        pytest.param(
            HELP + TYPE + info(block_size=128, num_gpu_blocks=16384, cache_dtype="auto"),
            2_097_152,
            id="older-vllm-blocks-times-block-size",
        ),
        pytest.param(
            HELP + TYPE + info(block_size=16, num_gpu_blocks="None"),
            None,
            id="cache-not-allocated-yet",
        ),
        pytest.param(OTHER, None, id="no-cache-config-family"),
        pytest.param("", None, id="empty-page"),
        pytest.param("<html>not a metrics page</html>\n", None, id="not-prometheus-text"),
        pytest.param(
            "this line { is broken\n" + HELP + TYPE + info(kv_cache_size_tokens=4096),
            4_096,
            id="a-broken-line-elsewhere-does-not-matter",
        ),
        pytest.param(
            HELP
            + TYPE
            + info(engine=0, kv_cache_size_tokens=8192)
            + info(engine=1, kv_cache_size_tokens=4096),
            4_096,
            id="several-engines-on-one-page-the-smallest",
        ),
        pytest.param(
            HELP + TYPE + info(kv_cache_size_tokens="-5", num_gpu_blocks=2, block_size=16),
            32,
            id="a-nonsense-token-label-falls-back-to-blocks",
        ),
    ],
)
def test_kv_cache_tokens_are_read_from_cache_config_info(page: str, tokens: int | None) -> None:
    assert parse_kv_cache_tokens(page) == tokens


PLANNED = 1_000_000


@pytest.mark.parametrize(
    ("measured", "status", "reason"),
    [
        pytest.param(None, "Unknown", "NoEngineReported", id="no-engine-reported-is-unknown"),
        pytest.param(PLANNED, "True", "KVCacheMatchesPlan", id="equal-matches"),
        pytest.param(1_100_000, "True", "KVCacheMatchesPlan", id="plus-10-percent-matches"),
        pytest.param(900_000, "True", "KVCacheMatchesPlan", id="minus-10-percent-matches"),
        pytest.param(1_100_001, "False", "KVCacheDiffersFromPlan", id="just-over-10-percent"),
        pytest.param(899_999, "False", "KVCacheDiffersFromPlan", id="just-under-minus-10"),
        pytest.param(1_312, "False", "KVCacheDiffersFromPlan", id="far-smaller-differs"),
        pytest.param(0, "False", "KVCacheDiffersFromPlan", id="no-cache-at-all-differs"),
    ],
)
def test_plan_verified_within_ten_percent(measured: int | None, status: str, reason: str) -> None:
    c = plan_verified(measured, PLANNED, generation=4)
    assert (c.type, c.status, c.reason, c.observed_generation) == (
        "PlanVerified",
        status,
        reason,
        4,
    )


def test_plan_not_verified_message_names_both_numbers_and_the_percentage() -> None:
    message = plan_verified(1_312, 2_097_152, generation=1).message
    assert "1,312" in message
    assert "2,097,152" in message
    assert "-99.9%" in message


def test_a_plan_of_zero_tokens_is_verified_only_by_zero() -> None:
    assert plan_verified(0, 0, 1).status == "True"
    assert plan_verified(16, 0, 1).status == "False"


PLAN = plan(
    LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 1, "memoryGiB": 80, "perNode": 8},
        }
    )
)
NEW = LLMDeploymentStatus()  # no status yet
ENGINE = {
    "metadata": {"name": "x-tp1"},
    "spec": {"replicas": 1},
    "status": {"readyReplicas": 1, "replicas": 1, "updatedReplicas": 1},
}


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


@pytest.mark.parametrize(
    ("reported", "measured", "verified"),
    [
        pytest.param((), None, "Unknown", id="nothing-reported-no-measured"),
        pytest.param(
            (PLAN.kv_cache_tokens_per_replica,),
            PLAN.kv_cache_tokens_per_replica,
            "True",
            id="one-engine-as-planned",
        ),
        pytest.param(
            (PLAN.kv_cache_tokens_per_replica, 1_000),
            1_000,
            "False",
            id="the-smallest-engine-counts",
        ),
    ],
)
def test_ready_status_reports_the_smallest_engine_and_plan_verified(
    reported: tuple[int, ...], measured: int | None, verified: str
) -> None:
    observed = Observed(ENGINE, (), None, (), kv_cache_tokens=reported)
    status = status_json(
        ready_status(old=NEW, generation=1, plan=PLAN, observed=observed, endpoint="e")
    )
    assert (status.get("measured") or {}).get("kvCacheTokens") == measured
    assert conditions(status)["PlanVerified"]["status"] == verified


def test_same_figures_on_resync_write_nothing_new() -> None:
    observed = Observed(ENGINE, (), None, (), kv_cache_tokens=(1_000,))
    first = ready_status(old=NEW, generation=1, plan=PLAN, observed=observed, endpoint="e")
    again = ready_status(old=first, generation=1, plan=PLAN, observed=observed, endpoint="e")
    assert again == first


def test_an_invalid_spec_keeps_the_last_plan_verified_and_measured() -> None:
    observed = Observed(ENGINE, (), None, (), kv_cache_tokens=(1_000,))
    good = ready_status(old=NEW, generation=1, plan=PLAN, observed=observed, endpoint="e")
    bad = status_json(invalid_status(good, 2, "InvalidSpec", "spec.gpus.count: must be at least 1"))
    assert conditions(bad)["PlanVerified"]["reason"] == "KVCacheDiffersFromPlan"
    assert bad["measured"] == {"kvCacheTokens": 1_000}


def verified(state: str | None) -> LLMDeploymentStatus:
    if state is None:
        return NEW
    return LLMDeploymentStatus.model_validate(
        {"conditions": [{"type": "PlanVerified", "status": state, "message": "m"}]}
    )


@pytest.mark.parametrize(
    ("before", "after", "warn"),
    [
        pytest.param(None, "False", True, id="first-status-false-warns"),
        pytest.param("Unknown", "False", True, id="unknown-to-false-warns"),
        pytest.param("True", "False", True, id="true-to-false-warns"),
        pytest.param("False", "False", False, id="staying-false-warns-no-more"),
        pytest.param("False", "True", False, id="recovering-is-no-warning"),
        pytest.param("Unknown", "True", False, id="verified-is-no-warning"),
    ],
)
def test_plan_not_verified_warns_once_when_it_turns_false(
    before: str | None, after: str, warn: bool
) -> None:
    assert (newly_unverified(verified(before), verified(after)) is not None) is warn


TEMPLATE = {
    "metadata": {"labels": {"llmfleet.dev/deployment": "x", "llmfleet.dev/layout": "tp1"}},
    "spec": {"containers": [{"name": "vllm", "command": ["python3"], "args": ["--a", "1"]}]},
}


def pod(
    uid: str,
    *,
    ready: bool = True,
    ip: str | None = "127.17.0.2",
    layout: str = "tp1",
    args: tuple[str, ...] = ("--a", "1"),
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"x-{uid}",
        "uid": uid,
        "labels": {
            "llmfleet.dev/deployment": "x",
            "llmfleet.dev/layout": layout,
            "pod-template-hash": "abc",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]
    }
    if ip:
        status["podIP"] = ip
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "vllm", "command": ["python3"], "args": list(args)}]},
        "status": status,
    }


@pytest.mark.parametrize(
    ("candidate", "counts"),
    [
        pytest.param(pod("a"), True, id="ready-current-template-counts"),
        pytest.param(pod("a", ready=False), False, id="not-ready-yet"),
        pytest.param(pod("a", ip=None), False, id="no-pod-ip"),
        pytest.param(pod("a", deleting=True), False, id="being-deleted"),
        pytest.param(pod("a", layout="tp2"), False, id="previous-layout"),
        pytest.param(pod("a", args=("--a", "2")), False, id="previous-template-in-a-rollout"),
    ],
)
def test_only_ready_engines_of_the_current_template_report(
    candidate: dict[str, Any], counts: bool
) -> None:
    assert (reporting_engines([candidate], TEMPLATE) == [candidate]) is counts


def test_without_an_engine_deployment_no_pod_reports() -> None:
    assert reporting_engines([pod("a")], None) == []


class Pages:
    """A scraper that serves canned pages and counts the reads."""

    def __init__(self, pages: dict[str, str | None]) -> None:
        self.pages = pages
        self.reads: list[str] = []

    def __call__(self, ip: str, port: int) -> str | None:
        assert port == 8000
        self.reads.append(ip)
        return self.pages.get(ip)


def page(tokens: int) -> str:
    return HELP + TYPE + info(kv_cache_size_tokens=tokens)


def test_each_pod_is_read_once_then_served_from_its_uid() -> None:
    pages = Pages({"127.17.0.2": page(2048), "127.17.0.3": page(4096)})
    cache = EngineKVCache(8000, pages)
    pods = [pod("a", ip="127.17.0.2"), pod("b", ip="127.17.0.3")]
    assert cache.measure("ns", "x", pods) == (2048, 4096)
    assert cache.measure("ns", "x", pods) == (2048, 4096)
    assert sorted(pages.reads) == ["127.17.0.2", "127.17.0.3"]


def test_a_pod_that_does_not_answer_is_asked_again_only_after_the_retry_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(kvcache.time, "monotonic", lambda: clock[0])
    pages = Pages({})
    cache = EngineKVCache(8000, pages)
    pods = [pod("a")]
    assert cache.measure("ns", "x", pods) == ()
    assert cache.measure("ns", "x", pods) == ()
    assert len(pages.reads) == 1
    pages.pages["127.17.0.2"] = page(2048)
    clock[0] += kvcache.RETRY_SECONDS
    assert cache.measure("ns", "x", pods) == (2048,)
    assert len(pages.reads) == 2


def test_gone_pods_are_forgotten_and_a_new_pod_is_read() -> None:
    pages = Pages({"127.17.0.2": page(2048)})
    cache = EngineKVCache(8000, pages)
    assert cache.measure("ns", "x", [pod("a")]) == (2048,)
    # The same IP, a new pod (uid): read again, the old figure dropped.
    pages.pages["127.17.0.2"] = page(1024)
    assert cache.measure("ns", "x", [pod("b")]) == (1024,)
    assert cache.measure("ns", "x", []) == ()
    cache.forget("ns", "x")
    assert len(pages.reads) == 2
