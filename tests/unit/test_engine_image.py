"""The engine image of an LLMDeployment that does not name one is the operator's default engine
image: the chart's engine.defaultImage, through the operator's --default-engine-image and
`llmfleet run`'s settings, into the engine pods' template (render_fleet). An LLMBatchJob's
default stays the LLMFleet vLLM image, the one that holds the batch runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chartrender import of_kind, operator_container, render

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.models import DEFAULT_ENGINE_IMAGE, LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

CUSTOM = "registry.example/vllm/vllm-openai:v0.32.0-patched"
H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
CHAT_SPEC: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}


def config_from_chart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *set_args: str
) -> OperatorSettings:
    """`llmfleet run`'s settings as the chart runs it: the chart's environment set here, its
    arguments parsed, its GPU profiles ConfigMap written where --gpu-profiles points."""
    docs = render(*set_args)
    container = operator_container(docs)
    for var in container["env"]:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    (profiles,) = [d for d in of_kind(docs, "ConfigMap") if "gpu-profiles.yaml" in d["data"]]
    path = tmp_path / "gpu-profiles.yaml"
    path.write_text(profiles["data"]["gpu-profiles.yaml"])
    args = [
        f"--gpu-profiles={path}" if arg.startswith("--gpu-profiles=") else arg
        for arg in container["args"]
    ]
    return settings_from_args(build_parser().parse_args(["run", *args]))


def engine_image(cfg: OperatorSettings, spec: dict[str, Any]) -> str:
    """The engine image of an LLMDeployment with `spec` as an operator with `cfg` renders it."""
    s = LLMDeploymentSpec.model_validate(spec)
    children = render_fleet(Owner("chat", "ml", "uid-1"), s, plan(s), cfg.fleet).objects()
    (engine,) = [c for c in children if c["metadata"]["name"] == "chat-tp1"]
    (container,) = engine["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_the_charts_default_engine_image_runs_llmdeployments_without_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = config_from_chart(monkeypatch, tmp_path, f"engine.defaultImage={CUSTOM}")
    assert "image" not in CHAT_SPEC.get("engine", {})
    assert engine_image(cfg, CHAT_SPEC) == CUSTOM


def test_by_default_the_chart_runs_the_pinned_engine_image(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert engine_image(config_from_chart(monkeypatch, tmp_path), CHAT_SPEC) == DEFAULT_ENGINE_IMAGE


def test_the_flag_wins_over_the_environment_and_a_spec_image_over_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMFLEET_DEFAULT_ENGINE_IMAGE", "from-the-environment:1")
    from_env = settings_from_args(build_parser().parse_args(["run", "--no-leader-election"]))
    assert engine_image(from_env, CHAT_SPEC) == "from-the-environment:1"
    cfg = settings_from_args(
        build_parser().parse_args(["run", "--no-leader-election", "--default-engine-image", CUSTOM])
    )
    assert engine_image(cfg, CHAT_SPEC) == CUSTOM
    own = {**CHAT_SPEC, "engine": {"image": "mine:2"}}
    assert engine_image(cfg, own) == "mine:2"
