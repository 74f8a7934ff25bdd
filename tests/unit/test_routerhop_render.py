"""The router hop in the router pod: rendered for an LLMDeployment with adapters only, in front of
vllm-router (which then listens on loopback only), and nowhere else: every other router pod stays
as it was, one container on the Service's port."""

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
    "no-lora": (spec(), False),
    "lora-without-adapters": (spec(engine=LORA), False),
    "lora-with-adapters": (spec(engine=LORA, adapters=ADAPTERS), True),
    **{
        f"example-{name}": (
            LLMDeploymentSpec.model_validate(doc["spec"]),
            bool(doc["spec"].get("adapters")),
        )
        for name, doc in EXAMPLES.items()
    },
}


# Only specs with a router pod (an example may have none); the three built ones all do.
ROUTED = {name: case for name, case in SPECS.items() if router_enabled(case[0], plan(case[0]))}


@pytest.mark.parametrize(("s", "hop"), ROUTED.values(), ids=ROUTED.keys())
def test_the_hop_is_rendered_only_with_adapters(s: LLMDeploymentSpec, hop: bool) -> None:
    containers = {c["name"]: c for c in router_template(s)["spec"]["containers"]}
    router = containers["router"]
    if not hop:
        assert list(containers) == ["router"]
        # vllm-router itself takes the Service's port, as before the hop existed.
        assert (flag(router["args"], "--host"), flag(router["args"], "--port")) == (
            "0.0.0.0",
            str(HTTP_PORT),
        )
        assert {p["name"]: p["containerPort"] for p in router["ports"]} == {
            "http": HTTP_PORT,
            "metrics": METRICS_PORT,
        }
        return
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


def test_the_hop_image_setting_changes_no_router_without_adapters() -> None:
    for s in (spec(), spec(engine=LORA)):
        assert router_template(s, "hop:1") == router_template(s, "elsewhere/hop:2")


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
    # case: (spec, the hop's hold in seconds, held adapter requests count as demand)
    "adapters-always-on": (spec(engine=LORA, adapters=ADAPTERS), 120, None),
    "adapters-at-zero": (spec(engine=LORA, adapters=ADAPTERS, autoscaling=ZERO), 420, True),
    "no-adapters-at-zero": (spec(engine=LORA, autoscaling=ZERO), None, False),
}


@pytest.mark.parametrize(("s", "hold", "wakes"), WAKES.values(), ids=WAKES.keys())
def test_a_request_held_for_an_adapter_wakes_a_fleet_at_zero_and_waits_for_it(
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
