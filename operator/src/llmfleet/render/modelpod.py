"""What every pod that runs the model shares, the engine Deployment's and the batch Job's alike:
the Hugging Face cache and environment, and the container's resources from the plan."""

from __future__ import annotations

import math
from typing import Any

from llmfleet.models import EngineSpec, ModelSpec
from llmfleet.planner import Plan

GPU_RESOURCE = "nvidia.com/gpu"
HF_HOME = "/var/cache/huggingface"
DEFAULT_CPU_REQUEST = "2"


def model_env(model: ModelSpec, engine: EngineSpec, on_gpus: bool) -> list[dict[str, Any]]:
    """HF_HOME on the cache volume, a writable HOME, the hub token if any, and on CPUs the KV
    cache size vLLM's CPU backend takes from the environment (whole GiB, at least 1)."""
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": HF_HOME},
        {"name": "HOME", "value": "/tmp"},
    ]
    if model.token_secret_ref is not None:
        ref = model.token_secret_ref
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
        )
    if not on_gpus:
        gib = max(1, math.ceil(engine.cpu_kv_cache_gib))
        env.append({"name": "VLLM_CPU_KVCACHE_SPACE", "value": str(gib)})
    return env


def resources(engine: EngineSpec, plan: Plan) -> dict[str, Any]:
    """The user's requests and limits, plus the plan's GPUs (or, without GPUs, a CPU request and
    the plan's memory where the user set none)."""
    user = engine.resources
    requests: dict[str, str] = dict(user.requests or {}) if user else {}
    limits: dict[str, str] = dict(user.limits or {}) if user else {}
    if plan.gpus_per_replica:
        # Extended resources: the request defaults to the limit. A multi-node replica has one
        # pod per pipeline stage, each on a node of its own.
        limits[GPU_RESOURCE] = str(plan.gpus_per_replica // plan.pipeline_parallel_size)
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


def cache_and_tmp(model: ModelSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model cache (the user's claim, else an emptyDir) at HF_HOME and a writable /tmp: the
    root filesystem is read-only."""
    cache: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": model.cache.claim_name}}
        if model.cache is not None
        else {"emptyDir": {}}
    )
    volumes = [{"name": "hf-cache", **cache}, {"name": "tmp", "emptyDir": {}}]
    mounts = [
        {"name": "hf-cache", "mountPath": HF_HOME},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    return volumes, mounts


def pod_metadata(
    engine: EngineSpec, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    """A pod template's metadata: the operator's `labels` and `annotations` plus the user's
    engine.podLabels and engine.podAnnotations (whose keys never collide with the operator's:
    the schema refuses those). Unset, they leave the template as it was before they existed, so
    an operator upgrade rolls no pod."""
    metadata: dict[str, Any] = {"labels": {**(engine.pod_labels or {}), **labels}}
    all_annotations = {**(engine.pod_annotations or {}), **annotations}
    if all_annotations:
        metadata["annotations"] = all_annotations
    return metadata
