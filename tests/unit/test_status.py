"""Status conditions computed from what the cluster shows."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.status import LLMDeploymentStatus, status_json
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.status import Observed, invalid_status, ready_status

NEW = LLMDeploymentStatus()  # no status yet

PLAN = plan(
    LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 2, "memoryGiB": 80, "perNode": 8},
        }
    )
)


def dep(
    ready: int, replicas: int, updated: int | None = None, name: str = "x-tp1"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
        "status": {
            "readyReplicas": ready,
            "replicas": replicas,
            "updatedReplicas": replicas if updated is None else updated,
        },
    }


def hpa(desired: int, active: bool = True) -> dict[str, Any]:
    cond = {
        "type": "ScalingActive",
        "status": "True" if active else "False",
        "reason": "ValidMetricFound" if active else "FailedGetPodsMetric",
        "message": "m",
    }
    return {"status": {"desiredReplicas": desired, "conditions": [cond]}}


PENDING_FOR_GPUS = {
    "metadata": {"name": "x-tp1-abc"},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    },
}


def conds(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


@pytest.mark.parametrize(
    ("observed", "expected"),
    [
        pytest.param(
            Observed(dep(2, 2), (), hpa(2), ()),
            {
                "Available": ("True", "EnginesReady"),
                "Progressing": ("False", "Stable"),
                "Degraded": ("False", "AsPlanned"),
            },
            id="all-ready-is-stable",
        ),
        pytest.param(
            Observed(dep(0, 2), (), hpa(2), ()),
            {"Available": ("False", "NoEngineReady"), "Progressing": ("True", "RollingOut")},
            id="nothing-ready-yet",
        ),
        pytest.param(
            Observed(dep(1, 1), (), hpa(2), ()),
            {"Progressing": ("True", "RollingOut")},
            id="hpa-wants-more-pods",
        ),
        pytest.param(
            Observed(dep(0, 1), (dep(2, 2, name="x-tp2"),), hpa(2), ()),
            {"Available": ("True", "EnginesReady"), "Progressing": ("True", "LayoutTransition")},
            id="old-layout-serves-during-transition",
        ),
        pytest.param(
            Observed(dep(2, 3), (), hpa(3), (PENDING_FOR_GPUS,)),
            {
                "ScalingLimited": ("True", "InsufficientGPUs"),
                "Degraded": ("True", "PodsUnschedulable"),
            },
            id="pending-for-gpus",
        ),
        pytest.param(
            Observed(dep(2, 2), (), hpa(2), (), router=dep(0, 1, name="x-router")),
            {"Available": ("False", "RouterNotReady")},
            id="engines-ready-but-the-router-endpoint-is-not",
        ),
        pytest.param(
            Observed(dep(2, 2), (), hpa(2), (), router=dep(1, 1, name="x-router")),
            {"Available": ("True", "EnginesReady")},
            id="engines-and-router-ready",
        ),
        pytest.param(
            Observed(dep(2, 2), (), hpa(5, active=False), ()),
            {"Degraded": ("True", "AutoscalerBlind"), "Progressing": ("False", "Stable")},
            id="hpa-without-metrics",
        ),
    ],
)
def test_conditions_follow_the_children(
    observed: Observed, expected: dict[str, tuple[str, str]]
) -> None:
    status = status_json(
        ready_status(old=NEW, generation=3, plan=PLAN, observed=observed, endpoint="e")
    )
    got = conds(status)
    for ctype, want in expected.items():
        assert got[ctype] == want
    assert got["Planned"] == ("True", "LayoutPlanned")
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])


def test_unchanged_status_keeps_transition_times_so_a_resync_writes_nothing() -> None:
    observed = Observed(dep(2, 2), (), hpa(2), ())
    first = status_json(
        ready_status(old=NEW, generation=1, plan=PLAN, observed=observed, endpoint="e")
    )
    for c in first["conditions"]:
        c["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    stored = LLMDeploymentStatus.model_validate(first)
    again = ready_status(old=stored, generation=1, plan=PLAN, observed=observed, endpoint="e")
    assert status_json(again) == first


def test_invalid_spec_keeps_serving_conditions_and_names_the_problem() -> None:
    observed = Observed(dep(2, 2), (), hpa(2), ())
    good = ready_status(old=NEW, generation=1, plan=PLAN, observed=observed, endpoint="e")
    bad = status_json(
        invalid_status(good, 2, "PlanningFailed", "spec.gpus.count: 3 GPUs cannot be split")
    )
    got = conds(bad)
    assert got["Planned"] == ("False", "PlanningFailed")
    assert got["Available"] == ("True", "EnginesReady")
    assert bad["plan"] == status_json(good)["plan"]
    assert bad["observedGeneration"] == 2


def pending(message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "x-tp1-abc"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_scheduler_retries_do_not_rewrite_status() -> None:
    first = pending(
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 "
        "nodes are available: 3 No preemption victims found for incoming pod."
    )
    retry = pending(
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 Insufficient "
        "nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never."
    )

    def status(p: dict[str, Any]) -> dict[str, Any]:
        return status_json(
            ready_status(
                old=NEW,
                generation=1,
                plan=PLAN,
                endpoint="e",
                observed=Observed(dep(2, 3), (), hpa(3), (p,)),
            )
        )

    a, b = status(first), status(retry)
    limited = next(c for c in a["conditions"] if c["type"] == "ScalingLimited")
    assert "Insufficient nvidia.com/gpu" in limited["message"]
    strip = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in a["conditions"]]
    assert strip == [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in b["conditions"]
    ]


def test_a_pod_waiting_for_its_claim_names_the_claim_not_a_node() -> None:
    """The 70B example's pods without the hf-cache claim it names: status says so."""
    stuck = pending(
        '0/5 nodes are available: persistentvolumeclaim "hf-cache" not found. preemption: '
        "0/5 nodes are available: 5 Preemption is not helpful for scheduling."
    )
    status = status_json(
        ready_status(
            old=NEW,
            generation=1,
            plan=PLAN,
            endpoint="e",
            observed=Observed(dep(0, 2), (), hpa(2), (stuck,)),
        )
    )
    limited = next(c for c in status["conditions"] if c["type"] == "ScalingLimited")
    assert limited["reason"] == "Unschedulable"
    assert 'persistentvolumeclaim "hf-cache" not found' in limited["message"]
    assert "no node matches" not in limited["message"]
