"""Standby engines (spec.autoscaling.standby; docs/autoscaling.md, "Standby engines"): a second
Deployment, `<name>-standby`, of engine pods that run vLLM in sleep mode behind the dev-mode
fence (llmfleet.devfence), and the ConfigMap that carries the fence into the engine image.
The operator's loop (reconcile/llmdeployment/standbyloop.py) puts them to sleep, wakes them and
turns their gate."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmfleet import devfence
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.engine import engine_pod_template
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.names import (
    ENGINE_CONTAINER,
    LAYOUT_LABEL,
    PROGRESS_GATE,
    Owner,
    layout_id,
    metadata,
    selector_labels,
)

STANDBY_LABEL = "llmfleet.dev/standby"
# The standby pods' readiness gate: True only while the operator has the engine awake, so the
# Service and the router leave a sleeping engine (which holds requests, not refuses them) out.
STANDBY_GATE = "llmfleet.dev/standby-awake"
FENCE_VOLUME = "llmfleet-devfence"
FENCE_MOUNT_PATH = "/etc/llmfleet/devfence"
FENCE_FILE = f"{devfence.MODULE}.py"
FENCE_MIDDLEWARE = f"{devfence.MODULE}.{devfence.DevModeFence.__name__}"
TOKEN_KEY = "token"


def standby_name(owner_name: str) -> str:
    """The standby Deployment's name, and its fence ConfigMap's and token Secret's."""
    return f"{owner_name}-standby"


def standby_layout(plan: Plan) -> str:
    """The standby pods' layout label: not the serving Deployment's, so that its selector (and
    the HPA's, which averages the queue over it) never counts a standby pod."""
    return f"{layout_id(plan)}-standby"


def fence_source() -> str:
    return Path(devfence.__file__).read_text(encoding="utf-8")


def render_fence_config_map(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(owner, standby_name(owner.name)),
        "data": {FENCE_FILE: fence_source()},
    }


def _sleep_mode(container: dict[str, Any], owner_name: str) -> None:
    container["args"] = [
        *container["args"],
        "--enable-sleep-mode",
        "--middleware",
        FENCE_MIDDLEWARE,
    ]
    token = {"secretKeyRef": {"name": standby_name(owner_name), "key": TOKEN_KEY}}
    env = [e for e in container["env"] if e["name"] != "PYTHONPATH"]
    env += [
        # Opens /sleep, /wake_up and /is_sleeping, and the rest the fence closes again.
        {"name": "VLLM_SERVER_DEV_MODE", "value": "1"},
        {"name": "PYTHONPATH", "value": FENCE_MOUNT_PATH},
        {"name": devfence.TOKEN_ENV, "valueFrom": token},
    ]
    container["env"] = sorted(env, key=lambda e: str(e["name"]))
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": FENCE_VOLUME, "mountPath": FENCE_MOUNT_PATH, "readOnly": True},
    ]


def standby_pod_template(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
) -> dict[str, Any]:
    """The serving engines' pod, in sleep mode, fenced, and gated by STANDBY_GATE."""
    template = engine_pod_template(owner, spec, plan, fleet)
    labels = template["metadata"]["labels"]
    labels[STANDBY_LABEL] = "true"
    labels[LAYOUT_LABEL] = standby_layout(plan)
    pod = template["spec"]
    for container in pod["containers"]:
        if container["name"] == ENGINE_CONTAINER:
            _sleep_mode(container, owner.name)
    pod["volumes"] = [
        *pod["volumes"],
        {"name": FENCE_VOLUME, "configMap": {"name": standby_name(owner.name)}},
    ]
    # The operator owns a standby engine's rotation: the stall watch's gate would fight it.
    gates = [g for g in pod.get("readinessGates", []) if g["conditionType"] != PROGRESS_GATE]
    pod["readinessGates"] = [*gates, {"conditionType": STANDBY_GATE}]
    return template


@dataclass(frozen=True)
class StandbyObjects:
    """The standby engines' Deployment and the ConfigMap carrying their fence."""

    fence: dict[str, Any]
    deployment: dict[str, Any]

    def objects(self) -> list[dict[str, Any]]:
        return [self.fence, self.deployment]


def render_standby(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
) -> StandbyObjects | None:
    """The fence's ConfigMap and the standby Deployment; None without standby replicas."""
    if plan.standby is None:
        return None
    layout = standby_layout(plan)
    meta = metadata(owner, standby_name(owner.name))
    meta["labels"] = {**meta["labels"], LAYOUT_LABEL: layout, STANDBY_LABEL: "true"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": plan.standby.replicas,
            "selector": {"matchLabels": {**selector_labels(owner), LAYOUT_LABEL: layout}},
            # A standby pod holds its GPUs: replace it in place rather than ask for spare ones.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "template": standby_pod_template(owner, spec, plan, fleet),
        },
    }
    return StandbyObjects(fence=render_fence_config_map(owner), deployment=deployment)
