"""spec.autoscaling.standby: what it is refused for, and what `llmfleet plan` says it costs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmfleet.cli import main
from llmfleet.models import LLMDeploymentSpec, field_problems
from llmfleet.planner import PlanError, plan

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
H100 = {"count": 2, "memoryGiB": 80}


def spec(model: str = LLAMA_8B, gpus: dict[str, Any] | None = None, **autoscaling: Any) -> Any:
    return {"model": {"name": model}, "gpus": gpus or H100, "autoscaling": autoscaling}


@pytest.mark.parametrize(
    ("autoscaling", "expected"),
    [
        pytest.param(
            {"enabled": False, "standby": {"replicas": 1}},
            "spec.autoscaling.standby.replicas: standby.replicas needs the autoscaler",
            id="standby-without-the-autoscaler",
        ),
        pytest.param(
            {"minReplicas": 0, "standby": {"replicas": 1}},
            "spec.autoscaling.standby.replicas: standby.replicas cannot go with minReplicas 0",
            id="standby-with-scale-to-zero",
        ),
        pytest.param(
            {"standby": {"replicas": 101}},
            "spec.autoscaling.standby.replicas",
            id="more-standby-than-allowed",
        ),
        pytest.param(
            {"standby": {"replicas": 1, "cooldownSeconds": 5}},
            "spec.autoscaling.standby.cooldownSeconds",
            id="cooldown-shorter-than-a-scrape",
        ),
        pytest.param(
            {"standby": {"sleepQueueDepth": 2}},
            "spec.autoscaling.standby.sleepQueueDepth: sleepQueueDepth applies only to standby",
            id="sleep-threshold-without-standby",
        ),
    ],
)
def test_malformed_standby_is_refused_naming_the_field(
    autoscaling: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        LLMDeploymentSpec.model_validate(spec(**autoscaling))
    found = [str(problem) for problem in field_problems(caught.value)]
    assert any(problem.startswith(expected) for problem in found), found


@pytest.mark.parametrize(
    ("deployment", "field", "reason"),
    [
        pytest.param(
            spec(LLAMA_70B, {"count": 8, "memoryGiB": 80}, standby={"replicas": 1}),
            "spec.autoscaling.standby.replicas",
            "StandbyUnmeasuredParallelism",
            id="engines-above-tensor-parallel-2-are-not-known-to-sleep-reliably",
        ),
        pytest.param(
            spec(targetQueueDepth=4, standby={"replicas": 1, "sleepQueueDepth": 4}),
            "spec.autoscaling.standby.sleepQueueDepth",
            "StandbyThresholds",
            id="sleep-threshold-at-the-wake-threshold-would-flap",
        ),
    ],
)
def test_standby_the_engines_cannot_honour_is_not_planned(
    deployment: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(PlanError) as caught:
        plan(LLMDeploymentSpec.model_validate(deployment))
    assert (caught.value.field, caught.value.reason) == (field, reason)


@pytest.mark.parametrize("replicas", [1, 3])
def test_plan_counts_the_gpus_and_host_memory_standby_engines_hold(replicas: int) -> None:
    planned = plan(LLMDeploymentSpec.model_validate(spec(standby={"replicas": replicas})))
    standby = planned.standby
    assert standby is not None
    assert planned.tensor_parallel_size == 1
    assert standby.gpus == replicas * planned.gpus_per_replica
    # Level 1 sleep offloads every weight of the engine to host memory.
    assert standby.host_memory_gib_per_replica == pytest.approx(planned.weights_gib, abs=0.01)
    assert standby.wake_queue_depth == planned.target_queue_depth
    assert standby.sleep_queue_depth == planned.target_queue_depth // 2
    assert planned.summary().standby == standby
    # The serving replicas and their GPUs are what they are without standby.
    without = plan(LLMDeploymentSpec.model_validate(spec()))
    assert (planned.replicas, planned.total_gpus) == (without.replicas, without.total_gpus)
    assert without.standby is None
    assert "standby" not in without.model_dump(by_alias=True, mode="json")


def test_a_tensor_parallel_2_engine_may_stand_by_holding_both_its_gpus() -> None:
    # Measured reliable at TP 2 (bench/gpu/h200x2-2026-11-28-sleep-tp2.jsonl), so planned.
    deployment = spec(standby={"replicas": 1}) | {"strategy": "SinglePod"}
    planned = plan(LLMDeploymentSpec.model_validate(deployment))
    assert planned.tensor_parallel_size == 2
    assert planned.standby is not None
    assert planned.standby.gpus == 2


def test_plan_table_states_the_standby_cost_only_with_standby(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "standby.yaml"
    manifest.write_text(
        "apiVersion: llmfleet.dev/v1alpha1\nkind: LLMDeployment\nmetadata: {name: s}\n"
        f"spec:\n  model: {{name: {LLAMA_8B}}}\n  gpus: {{count: 2, memoryGiB: 80}}\n"
        "  autoscaling: {standby: {replicas: 2, cooldownSeconds: 60}}\n"
    )
    assert main(["plan", "-f", str(manifest), "-o", "json"]) == 0
    weights = re.search(r'"weightsGiB": ([0-9.]+)', capsys.readouterr().out)
    assert weights is not None
    assert main(["plan", "-f", str(manifest)]) == 0
    table = capsys.readouterr().out
    row = re.search(r"Standby: +2 asleep, holding 2 GPUs and ([0-9.]+) GiB of host memory", table)
    assert row is not None, table
    assert float(row.group(1)) >= float(weights.group(1))
    assert "for 60 s" in table
