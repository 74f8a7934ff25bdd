"""The operator's metric helpers (llmfleet.metrics): pure bookkeeping the reconciler calls, checked
through what the Prometheus registry would serve."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from llmfleet import metrics as m
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan

NS, NAME = "metrics-test", "chat"
T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    m.forget(NS, NAME)
    yield
    m.forget(NS, NAME)


def spec(**extra: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 8, "memoryGiB": 80, "perNode": 8},
            **extra,
        }
    )


def pod(
    uid: str,
    created: datetime,
    ready_at: datetime | None,
    *,
    ready: str = "True",
    layout: str = "tp1",
) -> dict[str, Any]:
    conditions = []
    if ready_at is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": ready,
                "lastTransitionTime": ready_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return {
        "metadata": {
            "name": f"{NAME}-{layout}-{uid}",
            "namespace": NS,
            "uid": uid,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {"llmfleet.dev/layout": layout},
        },
        "status": {"conditions": conditions},
    }


# --- conditions ------------------------------------------------------------------------------


def condition(ctype: str, status: str, reason: str) -> float | None:
    return value(
        "llmfleet_condition",
        namespace=NS,
        llmdeployment=NAME,
        type=ctype,
        status=status,
        reason=reason,
    )


def test_conditions_publish_the_current_ones_and_drop_the_old() -> None:
    m.set_conditions(
        NS,
        NAME,
        [
            {"type": "Available", "status": "False", "reason": "NoEngineReady"},
            {"type": "Planned", "status": "True", "reason": "LayoutPlanned"},
        ],
    )
    assert condition("Available", "False", "NoEngineReady") == 1
    assert condition("Planned", "True", "LayoutPlanned") == 1
    m.set_conditions(NS, NAME, [{"type": "Available", "status": "True", "reason": "EnginesReady"}])
    assert condition("Available", "False", "NoEngineReady") is None
    assert condition("Planned", "True", "LayoutPlanned") is None
    assert condition("Available", "True", "EnginesReady") == 1
    m.forget(NS, NAME)
    assert condition("Available", "True", "EnginesReady") is None


# --- planner decisions -----------------------------------------------------------------------


def test_planner_decisions_count_changes_only() -> None:
    s = spec(objective="Latency")
    planned = plan(s)
    labels = {
        "objective": "Latency",
        "requested_strategy": "Auto",
        "strategy": planned.strategy,
        "layout": f"tp{planned.tensor_parallel_size}",
    }
    before = value("llmfleet_planner_decisions_total", **labels) or 0
    assert m.record_planner_decision(NS, NAME, s, planned)
    assert not m.record_planner_decision(NS, NAME, s, planned)  # a resync: same decision
    assert value("llmfleet_planner_decisions_total", **labels) == before + 1
    failed = {**labels, "strategy": "Failed", "layout": "none"}
    before_failed = value("llmfleet_planner_decisions_total", **failed) or 0
    assert m.record_planner_decision(NS, NAME, s, None)
    assert value("llmfleet_planner_decisions_total", **failed) == before_failed + 1


def test_planned_layout_and_forget() -> None:
    planned = plan(spec())
    m.set_planned(NS, NAME, planned)
    labels = {
        "namespace": NS,
        "llmdeployment": NAME,
        "strategy": planned.strategy,
        "tensor_parallel_size": str(planned.tensor_parallel_size),
        "gpus_per_replica": str(planned.gpus_per_replica),
    }
    assert value("llmfleet_plan_replicas", **labels) == planned.replicas
    m.forget(NS, NAME)
    assert value("llmfleet_plan_replicas", **labels) is None


def test_the_plans_speed_prediction_is_published_and_goes_when_the_gpu_has_no_constants() -> None:
    ids = {"namespace": NS, "llmdeployment": NAME}
    predicted = plan(spec(gpus={"count": 8, "profile": "h100-80gb"}))
    assert predicted.predicted is not None
    m.set_planned(NS, NAME, predicted)
    tps = value("llmfleet_predicted_output_tokens_per_second", **ids)
    assert tps == predicted.predicted.output_tokens_per_second
    assert tps is not None
    assert tps > 1000  # an 8B model on an H100 makes thousands of tokens/s
    assert value("llmfleet_predicted_concurrency", **ids) == predicted.predicted.concurrency

    unknown = plan(spec())  # memoryGiB without a product or profile: no speed constants
    assert unknown.predicted is None
    m.set_planned(NS, NAME, unknown)
    assert value("llmfleet_predicted_output_tokens_per_second", **ids) is None
    assert value("llmfleet_predicted_concurrency", **ids) is None

    m.set_planned(NS, NAME, predicted)
    m.forget(NS, NAME)
    assert value("llmfleet_predicted_output_tokens_per_second", **ids) is None


# --- engine startup --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "seconds"),
    [
        (pod("a", T0, T0 + timedelta(seconds=312)), 312.0),
        (pod("b", T0, T0 + timedelta(seconds=40), ready="False"), None),
        (pod("c", T0, None), None),
        (
            {
                "metadata": {"creation_timestamp": T0},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "last_transition_time": T0 + timedelta(minutes=2),
                        }
                    ]
                },
            },
            120.0,
        ),
        ({"metadata": {}, "status": {}}, None),
    ],
    ids=["ready", "not-ready", "no-ready-condition", "snake-case-datetimes", "empty"],
)
def test_engine_startup_seconds(the_pod: dict[str, Any], seconds: float | None) -> None:
    assert m.engine_startup_seconds(the_pod) == seconds


def test_engine_startups_are_observed_once_and_recent_only() -> None:
    now = T0 + timedelta(minutes=20)
    pods = [
        pod("a", T0 + timedelta(minutes=10), T0 + timedelta(minutes=15)),  # 300s, recent
        pod("b", T0, T0 + timedelta(minutes=2)),  # Ready 18 minutes ago: an operator restart
        pod("c", T0 + timedelta(minutes=19), None),  # still starting
    ]
    labels = {"namespace": NS, "llmdeployment": NAME, "layout": "tp1"}
    assert m.observe_engine_startups(NS, NAME, pods, now=now) == 1
    assert value("llmfleet_engine_startup_seconds_count", **labels) == 1
    assert value("llmfleet_engine_startup_seconds_sum", **labels) == 300
    # The next reconcile sees the same pods, and pod c Ready now.
    pods[2] = pod("c", T0 + timedelta(minutes=19), T0 + timedelta(minutes=21))
    assert m.observe_engine_startups(NS, NAME, pods, now=now + timedelta(minutes=2)) == 1
    assert value("llmfleet_engine_startup_seconds_count", **labels) == 2
    assert value("llmfleet_engine_startup_seconds_sum", **labels) == 420
    m.forget(NS, NAME)
    assert value("llmfleet_engine_startup_seconds_count", **labels) is None
