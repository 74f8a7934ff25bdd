"""The engine image of an LLMDeployment that does not name one is the operator's default engine
image: the chart's engine.defaultImage, through the operator's environment and `llmfleet run`,
into the engine pods' template. An LLMBatchJob's default stays the LLMFleet vLLM image, the one
that holds the batch runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeApi, install
from kubernetes import client as k8s
from test_chart_render import of_kind, operator_container, render
from test_status_written import BATCH_SPEC, CHAT_SPEC, NS, batchjob, llmdeployment

from llmfleet.cli import build_parser
from llmfleet.commands.run import operator_config
from llmfleet.models import DEFAULT_BATCH_IMAGE, DEFAULT_ENGINE_IMAGE
from llmfleet.operator_app import llmdeployment_controller
from llmfleet.reconcile.batchjob import BatchJobController

CUSTOM = "registry.example/vllm/vllm-openai:v0.32.0-patched"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return install(monkeypatch)


def operator_from_chart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *set_args: str
) -> list[str]:
    """`llmfleet run`'s arguments as the chart runs it, with the chart's environment set here
    and its GPU profiles ConfigMap written where --gpu-profiles points."""
    docs = render(*set_args)
    container = operator_container(docs)
    for var in container["env"]:
        if "value" in var:
            monkeypatch.setenv(var["name"], var["value"])
    (profiles,) = [d for d in of_kind(docs, "ConfigMap") if "gpu-profiles.yaml" in d["data"]]
    path = tmp_path / "gpu-profiles.yaml"
    path.write_text(profiles["data"]["gpu-profiles.yaml"])
    return [
        f"--gpu-profiles={path}" if arg.startswith("--gpu-profiles=") else arg
        for arg in container["args"]
    ]


def engine_image(fake: FakeApi, args: list[str], spec: dict[str, Any]) -> str:
    """The engine image of an LLMDeployment with `spec`, reconciled by `llmfleet run ARGS`."""
    cfg = operator_config(build_parser().parse_args(["run", *args]))
    llmdeployment(fake, spec)
    llmdeployment_controller(cfg, k8s.ApiClient()).reconcile_by_name(NS, "chat")
    engine = fake.get("apps/v1", "Deployment", NS, "chat-tp1")
    (container,) = engine["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_the_charts_default_engine_image_runs_llmdeployments_without_one(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = operator_from_chart(monkeypatch, tmp_path, f"engine.defaultImage={CUSTOM}")
    assert "image" not in CHAT_SPEC.get("engine", {})
    assert engine_image(fake, args, CHAT_SPEC) == CUSTOM


def test_by_default_the_chart_runs_the_pinned_engine_image(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    args = operator_from_chart(monkeypatch, tmp_path)
    assert engine_image(fake, args, CHAT_SPEC) == DEFAULT_ENGINE_IMAGE


def test_the_flag_wins_over_the_environment_and_a_spec_image_over_both(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMFLEET_DEFAULT_ENGINE_IMAGE", "from-the-environment:1")
    assert engine_image(fake, ["--default-engine-image", CUSTOM], CHAT_SPEC) == CUSTOM
    own = {**CHAT_SPEC, "engine": {"image": "mine:2"}}
    assert engine_image(fake, ["--default-engine-image", CUSTOM], own) == "mine:2"


def test_a_batch_job_without_an_image_runs_the_image_with_the_batch_runner(
    fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMFLEET_DEFAULT_ENGINE_IMAGE", CUSTOM)
    batchjob(fake, BATCH_SPEC)
    BatchJobController(k8s.ApiClient(), scraper=lambda _ip: None).reconcile_by_name(NS, "tiny")
    job = fake.get("batch/v1", "Job", NS, "tiny")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == DEFAULT_BATCH_IMAGE
