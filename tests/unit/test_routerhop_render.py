"""The router hop in the router pod: rendered in every router pod, in front of vllm-router (which
listens on loopback only), with the room it admits requests into (late binding) from the plan,
and, for an LLMDeployment with adapters, their names."""

from __future__ import annotations

from typing import Any

import pytest
from examplepods import EXAMPLES

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.names import HTTP_PORT
from llmfleet.render.router import METRICS_PORT, router_enabled
from llmfleet.render.routerhop import (
    HOP_CONTAINER,
    LOOPBACK,
    ROUTER_LOOPBACK_METRICS_PORT,
    ROUTER_LOOPBACK_PORT,
)
from llmfleet.routerhop.__main__ import config_of, parse
from llmfleet.routerhop.admission import Room
from llmfleet.routerhop.metrics import HopMetrics
from llmfleet.settings import OperatorSettings

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
H100 = {"count": 8, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
LORA = {"lora": {"maxAdapters": 2, "maxRank": 16}}
ADAPTERS = [{"name": "sql", "source": "org/sql"}, {"name": "chat-v2", "source": "org/chat"}]


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "llama"},
        "gpus": H100,
        "router": {"enabled": True},
    }
    return LLMDeploymentSpec.model_validate({**body, **overrides})


def router_template(s: LLMDeploymentSpec, hop_image: str = "hop:1") -> dict[str, Any]:
    fleet = OperatorSettings(router_hop_image=hop_image).fleet
    (dep,) = [
        o
        for o in render_fleet(OWNER, s, plan(s), fleet).objects()
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-router"
    ]
    template: dict[str, Any] = dep["spec"]["template"]
    return template


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


SPECS = {
    "no-lora": spec(),
    "lora-without-adapters": spec(engine=LORA),
    "lora-with-adapters": spec(engine=LORA, adapters=ADAPTERS),
    **{
        f"example-{name}": LLMDeploymentSpec.model_validate(doc["spec"])
        for name, doc in EXAMPLES.items()
    },
}


# Only specs with a router pod (an example may have none); the three built ones all do.
ROUTED = {name: s for name, s in SPECS.items() if router_enabled(s, plan(s))}


@pytest.mark.parametrize("s", ROUTED.values(), ids=ROUTED.keys())
def test_every_router_pod_has_the_hop_in_front_of_vllm_router(s: LLMDeploymentSpec) -> None:
    containers = {c["name"]: c for c in router_template(s)["spec"]["containers"]}
    router = containers["router"]
    assert list(containers) == ["router", HOP_CONTAINER]
    # vllm-router only on loopback: no port a Service, a probe or a scraper could name.
    args = router["args"]
    assert flag(args, "--host") == flag(args, "--prometheus-host") == LOOPBACK
    assert flag(args, "--port") == str(ROUTER_LOOPBACK_PORT)
    assert flag(args, "--prometheus-port") == str(ROUTER_LOOPBACK_METRICS_PORT)
    assert "ports" not in router
    # The hop has the ports the Service (targetPort http) and the PodMonitor (port metrics) name.
    hop_ports = {p["name"]: p["containerPort"] for p in containers[HOP_CONTAINER]["ports"]}
    assert hop_ports == {"http": HTTP_PORT, "metrics": METRICS_PORT}


ROUTER_REPLICAS = {
    "one-router": (spec(), 1),
    "three-routers-share-the-room": (spec(router={"enabled": True, "replicas": 3}), 3),
    "lora-with-adapters": (spec(engine=LORA, adapters=ADAPTERS), 1),
}


@pytest.mark.parametrize(("s", "routers"), ROUTER_REPLICAS.values(), ids=ROUTER_REPLICAS)
def test_the_hop_admits_into_the_planned_batch_and_queue_of_each_ready_engine(
    s: LLMDeploymentSpec, routers: int
) -> None:
    p = plan(s)
    (_, hop) = router_template(s)["spec"]["containers"]
    config = config_of(parse(hop["args"]), "")
    assert config.room == Room(
        slots_per_engine=p.max_concurrent_sequences,
        # One over the HPA's target, so that a queue the HPA and standby read still shows.
        queue_per_engine=p.target_queue_depth + 1,
        routers=routers,
    )
    # Room comes when a new engine has started: a request waits up to its startup budget.
    assert config.admit_seconds == config.hold_seconds + p.startup_budget_seconds
    assert config.admit_seconds > p.startup_budget_seconds


def test_the_hop_knows_the_base_the_adapters_and_where_vllm_router_listens() -> None:
    s = spec(engine=LORA, adapters=ADAPTERS)
    (_, hop) = router_template(s)["spec"]["containers"]
    env = {e["name"]: e["value"] for e in hop["env"]}
    config = config_of(parse(hop["args"]), env["LLMFLEET_ADAPTERS"])
    assert config.base_models == {"llama"}
    assert config.adapters == {"sql", "chat-v2"}
    assert config.router_url == f"http://{LOOPBACK}:{ROUTER_LOOPBACK_PORT}"
    assert config.router_metrics_url.endswith(f":{ROUTER_LOOPBACK_METRICS_PORT}/metrics")
    assert flag(hop["args"], "--namespace") == "team-a"
    assert flag(hop["args"], "--port") == str(HTTP_PORT)
    assert hop["image"] == "hop:1"


def test_the_hop_runs_the_image_the_setting_names_in_every_router() -> None:
    for s in (spec(), spec(engine=LORA)):
        (_, hop) = router_template(s, "elsewhere/hop:2")["spec"]["containers"]
        assert hop["image"] == "elsewhere/hop:2"


def test_editing_the_adapter_list_changes_the_router_pod_only_in_the_hops_list() -> None:
    one = router_template(spec(engine=LORA, adapters=ADAPTERS[:1]))
    two = router_template(spec(engine=LORA, adapters=ADAPTERS))
    (r1, h1), (r2, h2) = one["spec"]["containers"], two["spec"]["containers"]
    assert r1 == r2
    assert {k: v for k, v in h1.items() if k != "env"} == {
        k: v for k, v in h2.items() if k != "env"
    }


ZERO = {"minReplicas": 0, "maxReplicas": 2, "wakeTimeoutSeconds": 300}
WAKES = {
    # case: (spec, the hop's hold in seconds, held requests count as demand)
    "adapters-always-on": (spec(engine=LORA, adapters=ADAPTERS), 120, None),
    "adapters-at-zero": (spec(engine=LORA, adapters=ADAPTERS, autoscaling=ZERO), 420, True),
    # The hop holds the base's requests too until an engine is Ready: they are the wake-up.
    "no-adapters-at-zero": (spec(engine=LORA, autoscaling=ZERO), 420, True),
}


@pytest.mark.parametrize(("s", "hold", "wakes"), WAKES.values(), ids=WAKES.keys())
def test_a_request_held_by_the_hop_wakes_a_fleet_at_zero_and_waits_for_it(
    s: LLMDeploymentSpec, hold: int | None, wakes: bool | None
) -> None:
    containers = {c["name"]: c for c in router_template(s)["spec"]["containers"]}
    if hold is not None:
        assert flag(containers[HOP_CONTAINER]["args"], "--hold-seconds") == str(hold)
    objects = render_fleet(OWNER, s, plan(s), OperatorSettings().fleet).objects()
    scaled = [o for o in objects if o["kind"] == "ScaledObject"]
    if wakes is None:
        assert not scaled
        return
    (demand,) = [t for t in scaled[0]["spec"]["triggers"] if t["name"] == "demand"]
    query = demand["metadata"]["query"]
    held = 'llmfleet_router_hop_requests_held{namespace="team-a",llmdeployment="chat"}'
    assert (held in query) == wakes
    # The series the query reads is the one the hop exports.
    assert HopMetrics().registry.get_sample_value("llmfleet_router_hop_requests_held") == 0
