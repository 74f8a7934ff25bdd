"""render_fleet's children by role: each field holds the object a user finds under that role, and
`objects()` applies exactly the list (order and bytes) the list-returning render_fleet applied."""

from __future__ import annotations

import json
from typing import Any

import pytest
from examplepods import EXAMPLES

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.planner import Plan, plan
from llmfleet.render import FleetDefaults, Owner, render_fleet
from llmfleet.render.autoscaling import render_hpa, render_pdb
from llmfleet.render.engine import render_engine
from llmfleet.render.fleet import MANAGED_KINDS
from llmfleet.render.leaderworkerset import render_leaderworkerset
from llmfleet.render.network_policy import render_network_policy
from llmfleet.render.router import render_router
from llmfleet.render.scaledobject import render_scaled_object
from llmfleet.render.service import render_service
from llmfleet.render.standby import STANDBY_LABEL, render_standby
from llmfleet.settings import OperatorSettings

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
POLICY = EngineNetworkPolicy(scrapers=({"namespaceSelector": {}},), operator=())
# Every optional child on: the engines' NetworkPolicy, and the Prometheus scale to zero needs.
FLEET = OperatorSettings(
    engine_network_policy=POLICY,
    keda_prometheus_url="http://prometheus.monitoring.svc:9090",
).fleet


def list_render(
    owner: Owner, spec: LLMDeploymentSpec, p: Plan, fleet: FleetDefaults
) -> list[dict[str, Any]]:
    """render_fleet as it was when it returned a list (commit 402ea81): the reference order."""
    engines = render_leaderworkerset if p.pipeline_parallel_size > 1 else render_engine
    objects = [render_service(owner), engines(owner, spec, p, fleet)]
    standby = render_standby(owner, spec, p, fleet)
    objects.extend(standby.objects() if standby else [])
    if fleet.network_policy is not None:
        objects.append(render_network_policy(owner, spec, p, fleet.network_policy))
    if spec.autoscaling.scales_to_zero:
        objects.append(render_scaled_object(owner, spec, p, fleet.keda_prometheus_url))
    elif spec.autoscaling.enabled:
        objects.append(render_hpa(owner, spec, p))
    if p.min_replicas > 1:
        objects.append(render_pdb(owner, p))
    router = render_router(owner, spec, p, fleet.router_hop_image)
    objects.extend(router.objects() if router else [])
    kinds = [kind for _, kind in MANAGED_KINDS]
    return sorted(objects, key=lambda o: (kinds.index(o["kind"]), o["metadata"]["name"]))


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpus": H100,
    }
    return LLMDeploymentSpec.model_validate({**body, **overrides})


# Beside the examples, the children no example renders: a ScaledObject and standby engines.
SPECS: dict[str, LLMDeploymentSpec] = {
    **{name: LLMDeploymentSpec.model_validate(doc["spec"]) for name, doc in EXAMPLES.items()},
    "scale-to-zero": spec(autoscaling={"minReplicas": 0, "maxReplicas": 3}),
    "standby": spec(autoscaling={"standby": {"replicas": 1}}),
    "one-pod": spec(gpus={**H100, "count": 1}, autoscaling={"enabled": False}),
}


@pytest.mark.parametrize("fleet", [OperatorSettings().fleet, FLEET], ids=["defaults", "all-on"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_objects_are_the_list_render_fleet_returned_byte_for_byte(
    name: str, fleet: FleetDefaults
) -> None:
    s = SPECS[name]
    owner = Owner(name=name.removesuffix(".yaml"), namespace="team-a", uid="1234")
    before = json.dumps(list_render(owner, s, plan(s), fleet))
    assert json.dumps(render_fleet(owner, s, plan(s), fleet).objects()) == before


def kind(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str(obj["kind"])


HPA, LWS = "HorizontalPodAutoscaler", "LeaderWorkerSet"


@pytest.mark.parametrize(
    ("name", "engine", "autoscaler", "pdb", "router", "standby"),
    [
        # One replica over two nodes: no router, and no budget (one replica cannot lose a pod).
        ("llama-3.1-405b-2x8xh100.yaml", LWS, HPA, False, False, False),
        ("llama-3.1-8b-multipod.yaml", "Deployment", HPA, True, True, False),
        ("tiny-cpu.yaml", "Deployment", HPA, False, True, False),
        ("scale-to-zero", "Deployment", "ScaledObject", False, True, False),
        ("standby", "Deployment", HPA, True, True, True),
        ("one-pod", "Deployment", None, False, False, False),
    ],
)
def test_each_child_is_found_under_its_role(
    name: str, engine: str, autoscaler: str | None, pdb: bool, router: bool, standby: bool
) -> None:
    s = SPECS[name]
    p = plan(s)
    fleet = render_fleet(OWNER, s, p, FLEET)
    assert kind(fleet.service) == "Service"
    assert fleet.service["metadata"]["name"] == OWNER.name
    assert kind(fleet.engine) == engine
    assert kind(fleet.autoscaler) == autoscaler
    assert kind(fleet.hpa) == (autoscaler if autoscaler == HPA else None)
    assert kind(fleet.scaled_object) == (autoscaler if autoscaler == "ScaledObject" else None)
    assert kind(fleet.pdb) == ("PodDisruptionBudget" if pdb else None)
    assert kind(fleet.network_policy) == "NetworkPolicy"
    assert (fleet.router is not None) == router
    if fleet.router is not None:
        assert kind(fleet.router.deployment) == "Deployment"
        assert kind(fleet.router.service) == "Service"
        assert fleet.router.deployment["metadata"]["name"] == "chat-router"
        assert fleet.endpoint == "http://chat-router.team-a.svc:8000/v1"
    else:
        assert fleet.endpoint == "http://chat.team-a.svc:8000/v1"
    assert (fleet.standby is not None) == standby
    if fleet.standby is not None:
        assert kind(fleet.standby.fence) == "ConfigMap"
        assert fleet.standby.deployment["metadata"]["labels"][STANDBY_LABEL] == "true"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_objects_apply_every_field_and_nothing_else_once(name: str) -> None:
    s = SPECS[name]
    fleet = render_fleet(OWNER, s, plan(s), FLEET)
    fields = [
        fleet.service,
        fleet.engine,
        fleet.network_policy,
        fleet.autoscaler,
        fleet.pdb,
    ]
    fields += fleet.standby.objects() if fleet.standby else []
    fields += fleet.router.objects() if fleet.router else []
    applied = fleet.objects()
    assert len(applied) == len([f for f in fields if f is not None])
    assert all(any(o is f for f in fields) for o in applied)
