"""Every example LLMDeployment is valid and plans, exactly as users will run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster.metricsstack.load import TINY_ARCHITECTURE

from llmfleet.cli import main
from llmfleet.models import LLMDeploymentSpec

# LLMBatchJob examples (batch-*.yaml) are checked by test_batch_examples.py.
EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.yaml")
    if not p.name.startswith("batch-")
)
EXPECTED = {
    "llama-3.1-70b-8xh100.yaml",
    "llama-3.1-8b-multipod.yaml",
    "qwen2.5-72b-fp8.yaml",
    "tiny-cpu.yaml",
}


def load(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return doc


def test_the_documented_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= EXPECTED


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_an_llmdeployment_with_a_valid_spec(path: Path) -> None:
    doc = load(path)
    assert doc["apiVersion"] == "llmfleet.dev/v1alpha1"
    assert doc["kind"] == "LLMDeployment"
    assert doc["metadata"]["name"]
    LLMDeploymentSpec.model_validate(doc["spec"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_plans(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0, capsys.readouterr().err


def test_tiny_cpu_example_runs_on_the_local_cluster_without_gpus() -> None:
    spec = load(Path(__file__).resolve().parents[2] / "examples" / "tiny-cpu.yaml")["spec"]
    assert "gpus" not in spec
    assert spec["model"]["name"] == "/models/tiny-llama"
    assert spec["model"]["architecture"] == TINY_ARCHITECTURE
    assert spec["engine"]["maxModelLen"] == 512
    assert (spec["autoscaling"]["minReplicas"], spec["autoscaling"]["maxReplicas"]) == (1, 3)
