"""The adapter fetcher beside a single-node LoRA engine (llmfleet.fetcher): a second container of
the operator's image that copies s3:// and gs:// adapters, and Hub adapters at a revision, into a
volume the engine reads, because vLLM's runtime LoRA API reads only local paths and Hub repos at
main. It runs in every LoRA engine pod, adapters of those kinds or not: adding the first one must
not change the pod template, which would restart every GPU pod (docs/lora.md).

Everything the template says about the fetcher is fixed by the plan, never by spec.adapters:
the token comes from a Secret named after the LLMDeployment (the operator creates it:
reconcile.llmdeployment.fetcher_token), and the volume's sizeLimit and the fetcher's caps from the
model, the highest LoRA rank and maxCpuAdapters. Editing the adapter list restarts no GPU pod."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmfleet.fetcher.paths import FETCH_ROOT, FETCHER_PORT, TOKEN_ENV
from llmfleet.fetcher.store import DEFAULT_MAX_BYTES
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan

FETCHER_CONTAINER = "adapter-fetcher"
FETCHER_PORT_NAME = "fetcher"
FETCH_VOLUME = "adapter-fetch"
# Copies files with a few threads; it holds no model, so a small, fixed reservation.
FETCHER_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
# The engine's Hub settings, which the fetcher needs for an adapter at a revision.
HUB_ENV = ("HF_ENDPOINT", "HF_TOKEN")
TOKEN_KEY = "token"
MIB = 1 << 20
# Beside its weights an adapter folder may hold its tokenizer (tens of MiB), a README, a config.
FILES_BESIDE_WEIGHTS = 64 * MIB
# PEFT saves weights in the dtype they were trained in, often float32: twice a 16-bit model's.
SAVED_DTYPE_FACTOR = 2


def fetcher_secret_name(owner_name: str) -> str:
    """The Secret that holds the token the operator sends the fetchers of one LLMDeployment."""
    return f"{owner_name}-fetcher"


@dataclass(frozen=True)
class FetchLimits:
    max_adapters: int
    max_total_bytes: int
    max_bytes: int

    @property
    def size_limit(self) -> str:
        # A little over the fetcher's own cap, for the filesystem's overhead: the kubelet evicts
        # the pod past it, engine included, so the fetcher must refuse first.
        return f"{-(-self.max_total_bytes // MIB) + FILES_BESIDE_WEIGHTS // MIB}Mi"


def fetch_limits(plan: Plan) -> FetchLimits:
    """At most maxCpuAdapters adapters (what one engine keeps loaded), each of every linear layer
    at the plan's highest rank as saved on disk, plus its other files."""
    lora = plan.lora
    assert lora is not None
    # The planner's CPU cache is maxCpuAdapters adapters per engine worker, each whole.
    per_adapter = lora.cpu_bytes_per_pod // (plan.tensor_parallel_size * lora.max_cpu_adapters)
    budget = SAVED_DTYPE_FACTOR * per_adapter + FILES_BESIDE_WEIGHTS
    total = lora.max_cpu_adapters * budget
    return FetchLimits(lora.max_cpu_adapters, total, min(DEFAULT_MAX_BYTES, total))


def runs_fetcher(plan: Plan) -> bool:
    """Every pod of a multi-node replica reads the adapter's files (each stage loads its layers),
    and a fetcher fills only its own pod's volume: single-node layouts only."""
    return plan.lora is not None and plan.pipeline_parallel_size == 1


def fetch_volume(plan: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume, and the engine's read-only mount of it."""
    return (
        {"name": FETCH_VOLUME, "emptyDir": {"sizeLimit": fetch_limits(plan).size_limit}},
        {"name": FETCH_VOLUME, "mountPath": FETCH_ROOT, "readOnly": True},
    )


def fetcher_container(
    owner_name: str,
    spec: LLMDeploymentSpec,
    plan: Plan,
    engine_env: list[dict[str, Any]],
    image: str,
) -> dict[str, Any]:
    store = spec.engine.lora.object_store if spec.engine.lora is not None else None
    limits = fetch_limits(plan)
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
        "--max-bytes",
        str(limits.max_bytes),
        "--max-adapters",
        str(limits.max_adapters),
        "--max-total-bytes",
        str(limits.max_total_bytes),
    ]
    if store is not None and store.endpoint:
        args += ["--s3-endpoint", store.endpoint]
    if store is not None and store.region:
        args += ["--s3-region", store.region]
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        # The fetcher's only: the engine container, which serves every client, never holds it.
        {
            "name": TOKEN_ENV,
            "valueFrom": {
                "secretKeyRef": {"name": fetcher_secret_name(owner_name), "key": TOKEN_KEY}
            },
        },
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
