"""GPU profiles: an LLMDeployment names a node pool instead of repeating its figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, parse_gpu_profiles
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan

CHART_VALUES = Path(__file__).resolve().parents[2] / "charts" / "llmfleet" / "values.yaml"
PROFILES = parse_gpu_profiles("""
l4-pool:
  memoryGiB: 24
  perNode: 4
  product: NVIDIA-L4
  nodeSelector: {cloud.example.com/pool: inference}
  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
""")


def spec(**gpus: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(
        {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": gpus}
    )


def test_profile_supplies_memory_per_node_product_and_placement() -> None:
    p = plan(spec(count=4, profile="l4-pool"), PROFILES)
    assert p.node_selector == {
        "cloud.example.com/pool": "inference",
        "nvidia.com/gpu.product": "NVIDIA-L4",
    }
    assert p.tolerations == (
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    )
    assert "24 GiB GPU" in p.reason


@pytest.mark.parametrize(
    ("gpus", "expected_memory"),
    [
        pytest.param({"profile": "l4-pool"}, "24 GiB", id="profile-memory"),
        pytest.param({"profile": "l4-pool", "memoryGiB": 48}, "48 GiB", id="spec-field-wins"),
    ],
)
def test_fields_set_in_the_spec_win_over_the_profile(
    gpus: dict[str, Any], expected_memory: str
) -> None:
    p = plan(spec(count=2, **gpus), PROFILES)
    assert f"{expected_memory} GPU" in p.reason


def test_per_node_from_profile_limits_tensor_parallelism() -> None:
    with pytest.raises(PlanError) as err:
        plan(
            spec(count=8, profile="l4-pool").model_copy(update={"strategy": "SinglePod"}), PROFILES
        )
    assert err.value.field == "spec.gpus.count"
    assert "4" in err.value.message


def test_unknown_profile_names_the_field_and_the_known_ones() -> None:
    with pytest.raises(PlanError) as err:
        plan(spec(count=1, profile="h200"), PROFILES)
    assert err.value.field == "spec.gpus.profile"
    assert "l4-pool" in err.value.message


def test_memory_is_required_without_a_profile() -> None:
    with pytest.raises(ValueError, match="memoryGiB"):
        spec(count=1)


def test_default_profiles_match_the_chart_defaults() -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    assert parse_gpu_profiles(yaml.safe_dump(values["gpuProfiles"])) == DEFAULT_GPU_PROFILES
