"""The vLLM engine Deployment: one per layout."""

from __future__ import annotations

import math
from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.names import (
    HTTP_PORT,
    LAYOUT_LABEL,
    Owner,
    common_labels,
    engine_deployment_name,
    layout_id,
    metadata,
    selector_labels,
)

GPU_RESOURCE = "nvidia.com/gpu"
# The OpenAI server module rather than the `vllm serve` console script: the same command runs in
# the upstream image and in a plain virtualenv.
ENGINE_COMMAND = ("python3", "-m", "vllm.entrypoints.openai.api_server")
HF_HOME = "/var/cache/huggingface"
# The image's user is root; these ids make it run unprivileged with a writable HOME and cache.
RUN_AS = 1000
# Seconds for endpoints and routers to stop sending new requests before SIGTERM; vLLM then
# finishes what it has in flight within the rest of the grace period.
PRESTOP_SLEEP_SECONDS = 10
TERMINATION_GRACE_SECONDS = 120
# What is left of the grace period after the preStop sleep, less time for vLLM's own teardown.
SHUTDOWN_TIMEOUT_SECONDS = TERMINATION_GRACE_SECONDS - PRESTOP_SLEEP_SECONDS - 20
DEFAULT_CPU_REQUEST = "2"
PROBE_PERIOD_SECONDS = 10


def _env(spec: LLMDeploymentSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": HF_HOME},
        {"name": "HOME", "value": "/tmp"},
    ]
    if spec.model.token_secret_ref is not None:
        ref = spec.model.token_secret_ref
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    if spec.engine.api_key_secret_ref is not None:
        ref = spec.engine.api_key_secret_ref
        env.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    if spec.gpus is None:
        env.append(
            {"name": "VLLM_CPU_KVCACHE_SPACE", "value": _gib_int(spec.engine.cpu_kv_cache_gib)}
        )
    return sorted(env, key=lambda e: str(e["name"]))


def _gib_int(value: float) -> str:
    return str(max(1, math.ceil(value)))


def _resources(spec: LLMDeploymentSpec, plan: Plan) -> dict[str, Any]:
    user = spec.engine.resources
    requests: dict[str, str] = dict(user.requests or {}) if user else {}
    limits: dict[str, str] = dict(user.limits or {}) if user else {}
    if plan.gpus_per_replica:
        # Extended resources: the request defaults to the limit.
        limits[GPU_RESOURCE] = str(plan.gpus_per_replica)
    else:
        requests.setdefault("cpu", DEFAULT_CPU_REQUEST)
        if plan.cpu_memory_gib:
            requests.setdefault("memory", f"{plan.cpu_memory_gib}Gi")
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = dict(sorted(requests.items()))
    if limits:
        out["limits"] = dict(sorted(limits.items()))
    return out


def _probes(plan: Plan) -> dict[str, Any]:
    health = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        # Loading weights takes minutes for big models; liveness waits until startup succeeds.
        "startupProbe": {
            **health,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "failureThreshold": max(
                3, math.ceil(plan.startup_budget_seconds / PROBE_PERIOD_SECONDS)
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
    cache: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": spec.model.cache.claim_name}}
        if spec.model.cache is not None
        else {"emptyDir": {}}
    )
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{plan.shm_size_gib}Gi"}},
        {"name": "hf-cache", **cache},
        {"name": "tmp", "emptyDir": {}},
    ]
    mounts = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "hf-cache", "mountPath": HF_HOME},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    return volumes, mounts


def render_engine(owner: Owner, spec: LLMDeploymentSpec, plan: Plan) -> dict[str, Any]:
    name = engine_deployment_name(owner.name, plan)
    layout = layout_id(plan)
    pod_labels = {**common_labels(owner), LAYOUT_LABEL: layout}
    volumes, mounts = _volumes(spec, plan)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.engine.image,
        "command": list(ENGINE_COMMAND),
        "args": [
            *plan.vllm_args,
            "--host",
            "0.0.0.0",
            "--port",
            str(HTTP_PORT),
            # On SIGTERM vLLM cuts in-flight requests short unless given time to finish them.
            "--shutdown-timeout",
            str(SHUTDOWN_TIMEOUT_SECONDS),
        ],
        "env": _env(spec),
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": _resources(spec, plan),
        **_probes(plan),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}},
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        # A Service named "vllm" would inject VLLM_PORT=tcp://..., which vLLM reads as its own.
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if plan.gpus_per_replica:
        pod_spec["tolerations"] = [
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
            *plan.tolerations,
        ]
    if plan.node_selector:
        pod_spec["nodeSelector"] = dict(plan.node_selector)
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": {**selector_labels(owner), "llmfleet.dev/layout": layout}},
        # Never drop below the serving capacity during a rollout; the surge pod needs free GPUs.
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "template": {
            "metadata": {
                "labels": pod_labels,
                "annotations": {
                    "prometheus.io/scrape": "true",
                    "prometheus.io/port": str(HTTP_PORT),
                    "prometheus.io/path": "/metrics",
                },
            },
            "spec": pod_spec,
        },
    }
    if not spec.autoscaling.enabled:
        # With an HPA the HPA owns replicas; rendering them would fight it on every apply.
        deployment_spec["replicas"] = plan.replicas
    meta = metadata(owner, name)
    meta["labels"] = {**meta["labels"], LAYOUT_LABEL: layout}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": deployment_spec,
    }
