"""The layouts a LoRA LLMDeployment renders to (single pod, multi pod, CPU only, multi node) and
the engine pod templates of each: shared by the unit tests of what LoRA adds to engine pods."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
H100 = {"count": 8, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}


def multi_node() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / "llama-3.1-405b-2x8xh100.yaml").read_text())[
        "spec"
    ]
    return spec


LAYOUTS = {
    "single-pod": {"model": MODEL, "gpus": H100, "strategy": "SinglePod"},
    "multi-pod": {"model": MODEL, "gpus": H100, "strategy": "MultiPod"},
    "cpu-only": {"model": MODEL},
    "multi-node": multi_node(),
}


def with_lora(body: dict[str, Any], **lora: Any) -> LLMDeploymentSpec:
    body = copy.deepcopy(body)
    body.setdefault("engine", {})["lora"] = lora
    return LLMDeploymentSpec.model_validate(body)


def engine_pod_templates(spec: LLMDeploymentSpec) -> dict[str, dict[str, Any]]:
    """Every engine pod template: a Deployment's, a LeaderWorkerSet's leader and worker."""
    out = {}
    for obj in render_fleet(OWNER, spec, plan(spec), FLEET).objects():
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            out[f"{name} leader"] = group["leaderTemplate"]
            out[f"{name} worker"] = group["workerTemplate"]
        elif obj["kind"] == "Deployment" and not name.endswith("-router"):
            out[name] = obj["spec"]["template"]
    return out


def vllm(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "vllm"]
    return container
