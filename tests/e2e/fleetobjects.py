"""An LLMDeployment's objects two ways: those the operator renders for it, and those of the
operator's kinds in the cluster; and the tiny CPU-engine spec the API-server fault tests create
by the dozen: shared by the e2e tests of the operator through faults and of leader failover."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from localcluster.metricsstack.load import TINY_ARCHITECTURE, TINY_MODEL, tiny_spec

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.fleet import MANAGED_KINDS
from llmfleet.render.names import MANAGED_BY
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

# The tiny model on a CPU engine: kwok runs its pods, so twenty of them fit anywhere.
TINY = tiny_spec(
    model={**TINY_MODEL, "name": "/models/tiny", "architecture": dict(TINY_ARCHITECTURE)},
    gpus=None,
    engine={
        "maxModelLen": 512,
        "cpuKVCacheGiB": 1,
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
    },
    autoscaling={"enabled": False},
)


def rendered(name: str, namespace: str, uid: str) -> set[str]:
    spec = LLMDeploymentSpec.model_validate(TINY)
    owner = Owner(name=name, namespace=namespace, uid=uid)
    return {
        f"{o['kind']}/{o['metadata']['name']}"
        for o in render_fleet(owner, spec, plan(spec, DEFAULT_GPU_PROFILES), FLEET).objects()
    }


def children(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    dyn = DynamicClient(api)
    out = []
    for api_version, kind in MANAGED_KINDS:
        items = dyn.resources.get(api_version=api_version, kind=kind).get(
            namespace=namespace, label_selector=f"app.kubernetes.io/managed-by={MANAGED_BY}"
        )
        out.extend({"kind": kind, **i.to_dict()} for i in items.items)
    return out
