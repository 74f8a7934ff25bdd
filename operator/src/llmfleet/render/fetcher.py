"""The adapter fetcher beside a single-node LoRA engine (llmfleet.fetcher): a second container of
the operator's image that copies s3:// and gs:// adapters, and Hub adapters at a revision, into a
volume the engine reads, because vLLM's runtime LoRA API reads only local paths and Hub repos at
main. It runs in every LoRA engine pod, adapters of those kinds or not: adding the first one must
not change the pod template, which would restart every GPU pod (docs/lora.md)."""

from __future__ import annotations

from typing import Any

from llmfleet.fetcher.paths import FETCH_ROOT, FETCHER_PORT
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE
from llmfleet.planner import Plan

FETCHER_CONTAINER = "adapter-fetcher"
FETCHER_PORT_NAME = "fetcher"
FETCH_VOLUME = "adapter-fetch"
# Copies files with a few threads; it holds no model, so a small, fixed reservation.
FETCHER_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
# The engine's Hub settings, which the fetcher needs for an adapter at a revision.
HUB_ENV = ("HF_ENDPOINT", "HF_TOKEN")


def runs_fetcher(plan: Plan) -> bool:
    """Every pod of a multi-node replica reads the adapter's files (each stage loads its layers),
    and a fetcher fills only its own pod's volume: single-node layouts only."""
    return plan.lora is not None and plan.pipeline_parallel_size == 1


def fetch_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume, and the engine's read-only mount of it."""
    return (
        {"name": FETCH_VOLUME, "emptyDir": {}},
        {"name": FETCH_VOLUME, "mountPath": FETCH_ROOT, "readOnly": True},
    )


def fetcher_container(
    spec: LLMDeploymentSpec, engine_env: list[dict[str, Any]], image: str = DEFAULT_FETCHER_IMAGE
) -> dict[str, Any]:
    store = spec.engine.lora.object_store if spec.engine.lora is not None else None
    args = [
        "fetch-adapters",
        # The pod's own address: in a pod it is the pod's network, and a node that runs pods
        # on its host network (the lab) keeps pods apart by address.
        "--host",
        "$(POD_IP)",
        "--port",
        str(FETCHER_PORT),
        "--dir",
        FETCH_ROOT,
    ]
    if store is not None and store.endpoint:
        args += ["--s3-endpoint", store.endpoint]
    if store is not None and store.region:
        args += ["--s3-region", store.region]
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        *(e for e in engine_env if e["name"] in HUB_ENV),
    ]
    container: dict[str, Any] = {
        "name": FETCHER_CONTAINER,
        "image": image,
        "command": ["llmfleet"],
        "args": args,
        "env": sorted(env, key=lambda e: str(e["name"])),
        "ports": [{"name": FETCHER_PORT_NAME, "containerPort": FETCHER_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": FETCHER_PORT_NAME},
            "periodSeconds": 5,
        },
        "resources": FETCHER_RESOURCES,
        "volumeMounts": [
            {"name": FETCH_VOLUME, "mountPath": FETCH_ROOT},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    if store is not None and store.secret_ref is not None:
        container["envFrom"] = [{"secretRef": {"name": store.secret_ref}}]
    return container
