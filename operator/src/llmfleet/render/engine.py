"""The vLLM engine Deployment: one per layout."""

from __future__ import annotations

import math
from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.adapters import ADAPTERS_MOUNT_PATH
from llmfleet.models.stall import stall_watched
from llmfleet.planner import Plan
from llmfleet.render.compilecache import compile_cache_env
from llmfleet.render.fetcher import fetch_volume, fetcher_container, runs_fetcher
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.modelpod import (
    cache_and_tmp,
    model_env,
    pod_metadata,
    resources,
)
from llmfleet.render.names import (
    ADAPTERS_GATE,
    COMPONENT_ENGINE,
    COMPONENT_ENGINE_WORKER,
    ENGINE_CONTAINER,
    HTTP_PORT,
    LAYOUT_LABEL,
    PROGRESS_GATE,
    Owner,
    engine_deployment_name,
    layout_id,
    metadata,
    pod_template_labels,
    selector_labels,
)
from llmfleet.render.podspec import node_placement, pod_security_context
from llmfleet.render.rollout_strategy import rollout_annotations, rollout_strategy

# `vllm serve MODEL`, vLLM's own command since 0.29 (the OpenAI server module and --model are
# deprecated). Multi-node workers run it too: only `vllm serve` honours --headless (it then
# starts the node's workers and no API server).
ENGINE_COMMAND = ("vllm", "serve")
# Seconds for endpoints and routers to stop sending new requests before SIGTERM; vLLM then
# finishes what it has in flight within the rest of the grace period.
PRESTOP_SLEEP_SECONDS = 10
TERMINATION_GRACE_SECONDS = 120
# What is left of the grace period after the preStop sleep, less time for vLLM's own teardown.
SHUTDOWN_TIMEOUT_SECONDS = TERMINATION_GRACE_SECONDS - PRESTOP_SLEEP_SECONDS - 20
PROBE_PERIOD_SECONDS = 10
# The startup probe asks this often: an engine is Ready (routed, counted by the HPA) within this
# of first answering /health. Until then vLLM's port is closed, so each try is a refused connect.
STARTUP_PROBE_PERIOD_SECONDS = 2
ADAPTERS_VOLUME = "lora-adapters"


def _env(spec: LLMDeploymentSpec, plan: Plan, image: str) -> list[dict[str, Any]]:
    env = model_env(spec.model, spec.engine, on_gpus=spec.gpus is not None)
    # Leaders and workers of a multi-node replica share the key: vLLM's rank_<n> directories
    # keep their files apart.
    env += compile_cache_env(spec.model, spec.engine, spec.gpus, image, plan.vllm_args)
    if plan.lora is not None:
        # The operator loads and unloads spec.adapters in the running engine (docs/lora.md).
        env.append({"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"})
    if spec.engine.api_key_secret_ref is not None:
        ref = spec.engine.api_key_secret_ref
        env.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    return sorted(env, key=lambda e: str(e["name"]))


def _probes(plan: Plan) -> dict[str, Any]:
    health = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        # The budget is twice the planner's predicted cold start (planner/startup.py): big
        # models take minutes to download and compile, and liveness waits until startup succeeds.
        "startupProbe": {
            **health,
            "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
            "failureThreshold": max(
                3, math.ceil(plan.startup_budget_seconds / STARTUP_PROBE_PERIOD_SECONDS)
            ),
        },
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {
            **health,
            "periodSeconds": 15,
            "timeoutSeconds": 5,
            "failureThreshold": 4,
        },
    }


def _volumes(
    spec: LLMDeploymentSpec, plan: Plan
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # Tensor parallelism's workers exchange tensors through shared memory.
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{plan.shm_size_gib}Gi"}}
    volumes, mounts = cache_and_tmp(spec.model)
    volumes, mounts = [shm, *volumes], [{"name": "dshm", "mountPath": "/dev/shm"}, *mounts]
    claim = spec.engine.lora.claim if spec.engine.lora is not None else None
    if claim is not None:
        # Read-only: engines only read adapters, and many pods may mount a ReadOnlyMany claim.
        volumes.append(
            {
                "name": ADAPTERS_VOLUME,
                "persistentVolumeClaim": {"claimName": claim.claim_name, "readOnly": True},
            }
        )
        mounts.append({"name": ADAPTERS_VOLUME, "mountPath": ADAPTERS_MOUNT_PATH, "readOnly": True})
    if runs_fetcher(plan):
        volume, mount = fetch_volume(plan)
        volumes.append(volume)
        mounts.append(mount)
    return volumes, mounts


def engine_pod_template(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
    *,
    launcher_args: tuple[str, ...] = (),
    worker: bool = False,
) -> dict[str, Any]:
    """The pod of one engine: a serving one (the OpenAI API on HTTP_PORT, probed, drained), or a
    multi-node replica's headless `worker` (no API, so no probes, ports or scrape annotations).
    `launcher_args` are the multi-node launcher's flags; `fleet` gives the image when the spec
    names none, the PriorityClass and the adapter fetcher's image."""
    serving = not worker
    component = COMPONENT_ENGINE_WORKER if worker else COMPONENT_ENGINE
    layout = layout_id(plan)
    pod_labels = {**pod_template_labels(owner, component), LAYOUT_LABEL: layout}
    volumes, mounts = _volumes(spec, plan)
    args = [spec.model.name, *plan.vllm_args, *launcher_args]
    if serving:
        args += [
            "--host",
            "0.0.0.0",
            "--port",
            str(HTTP_PORT),
            # On SIGTERM vLLM cuts in-flight requests short unless given time to finish them.
            "--shutdown-timeout",
            str(SHUTDOWN_TIMEOUT_SECONDS),
        ]
    image = spec.engine.image or fleet.engine_image
    container: dict[str, Any] = {
        "name": ENGINE_CONTAINER,
        "image": image,
        # An engine that dies at start leaves its log's tail as the termination message, which
        # status shows (Degraded EngineCrashLoop).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": list(ENGINE_COMMAND),
        "args": args,
        "env": _env(spec, plan, image),
        "resources": resources(spec.engine, plan),
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if serving:
        container["ports"] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
        container.update(_probes(plan))
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}}
    containers = [container]
    if runs_fetcher(plan):
        containers.append(
            fetcher_container(owner.name, spec, plan, container["env"], fleet.fetcher_image)
        )
    pod_spec: dict[str, Any] = {
        "containers": containers,
        "volumes": volumes,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # A Service named "vllm" would inject VLLM_PORT=tcp://..., which vLLM reads as its own.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(fs_group=True),
    }
    gates = []
    if serving and plan.lora is not None:
        # A new engine gets traffic only once the operator has loaded the adapters into it.
        gates.append({"conditionType": ADAPTERS_GATE})
    if serving and stall_watched(spec.engine.stall_detection):
        gates.append({"conditionType": PROGRESS_GATE})
    if gates:
        pod_spec["readinessGates"] = gates
    pod_spec.update(node_placement(plan))
    if fleet.engine_priority_class:
        # Opt-in: setting it changes the template, so every running engine restarts once.
        pod_spec["priorityClassName"] = fleet.engine_priority_class
    annotations = (
        {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(HTTP_PORT),
            "prometheus.io/path": "/metrics",
        }
        if serving
        else {}
    )
    return {"metadata": pod_metadata(spec.engine, pod_labels, annotations), "spec": pod_spec}


def render_engine(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
    *,
    replace_first: int = 0,
    one_at_a_time: bool = False,
) -> dict[str, Any]:
    """The engine Deployment; `replace_first` is how many of its pods of an earlier template
    serve nothing while holding GPUs its new pods wait for, `one_at_a_time` whether a healthy
    fleet rolls within its disruption budget on a full pool (render/rollout_strategy.py)."""
    name = engine_deployment_name(owner.name, plan)
    layout = layout_id(plan)
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": {**selector_labels(owner), "llmfleet.dev/layout": layout}},
        "strategy": rollout_strategy(replace_first, one_at_a_time=one_at_a_time),
        "template": engine_pod_template(owner, spec, plan, fleet),
    }
    if not spec.autoscaling.enabled:
        # With an HPA the HPA owns replicas; rendering them would fight it on every apply.
        deployment_spec["replicas"] = plan.replicas
    meta = metadata(owner, name)
    meta["labels"] = {**meta["labels"], LAYOUT_LABEL: layout}
    if marked := rollout_annotations(one_at_a_time):
        meta["annotations"] = marked
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": deployment_spec,
    }
