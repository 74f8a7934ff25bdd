"""Engine pods of a rollout as the API server holds them, and the plan they belong to: pods of an
earlier and of the current template, serving, failed, starting, or Pending for GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner
from llmfleet.render.names import layout_id
from llmfleet.settings import OperatorSettings

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
FLEET = OperatorSettings().fleet
H100 = {"memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}


MULTINODE = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-405b-2x8xh100.yaml"


def spec(replicas: int = 1) -> LLMDeploymentSpec:
    """A fleet of `replicas` engines of one GPU each."""
    return LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {**H100, "count": replicas},
            "autoscaling": {"enabled": False},
        }
    )


PLAN = plan(spec())
LAYOUT = layout_id(PLAN)
OLD, NEW = "7d4f", "5c9b"  # pod-template-hash of the earlier and the current template


def pod(
    name: str,
    template: str = OLD,
    *,
    ready: bool = False,
    restarts: int = 0,
    waiting: str | None = None,
    gpu_short: bool = False,
    cpu_short: bool = False,
    deleting: bool = False,
    layout: str = LAYOUT,
) -> dict[str, Any]:
    """An engine pod as the API server holds it: bound to a node unless the scheduler left it
    Pending for want of GPUs (or cpu)."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {
            "app.kubernetes.io/component": "engine",
            "llmfleet.dev/layout": layout,
            "pod-template-hash": template,
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T08:00:00Z"
    if gpu_short or cpu_short:
        short = "nvidia.com/gpu" if gpu_short else "cpu"
        said = f"0/3 nodes are available: 3 Insufficient {short}. preemption: 0/3 nodes"
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
        }
        return {
            "metadata": meta,
            "spec": {},
            "status": {
                "phase": "Pending",
                "conditions": [{**scheduled, "message": said}],
            },
        }
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "metadata": meta,
        "spec": {"nodeName": "kwok-pool-0"},
        "status": {
            "phase": "Running" if waiting is None else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                }
            ],
        },
    }


def deployment(
    ready: int, replicas: int, updated: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The engine Deployment as the API server holds it."""
    return {
        "metadata": {"name": "chat-tp1", "annotations": annotations or {}},
        "spec": {"replicas": replicas},
        "status": {
            "readyReplicas": ready,
            "replicas": replicas,
            "updatedReplicas": updated,
        },
    }
