"""The engines' NetworkPolicy (Helm value engine.networkPolicy, operator flag
--engine-network-policy): who it admits, to which pods, and that the chart's value reaches the
operator as a configuration it accepts."""

from __future__ import annotations

from typing import Any

import pytest
from chartrender import operator_container, operator_deployment, render

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import EngineNetworkPolicy, parse_engine_network_policy
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.network_policy import admits_every_source
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
H100 = {"count": 8, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
PROMETHEUS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prometheus"}}}
OPERATOR = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}
CLIENT = {"podSelector": {"matchLabels": {"role": "frontend"}}}
POLICY = EngineNetworkPolicy(scrapers=(PROMETHEUS,), operator=(OPERATOR,))

# Throughput on an 8B model: several pods behind the router. One pod with no autoscaling: the
# engine Service is the endpoint.
ROUTED = {"objective": "Throughput"}
UNROUTED = {"gpus": {**H100, "count": 1}, "autoscaling": {"enabled": False}}


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}
    body.update(overrides)
    return LLMDeploymentSpec.model_validate(body)


def children(s: LLMDeploymentSpec, policy: EngineNetworkPolicy | None) -> list[dict[str, Any]]:
    return render_fleet(
        OWNER, s, plan(s), OperatorSettings(engine_network_policy=policy).fleet
    ).objects()


def network_policy(s: LLMDeploymentSpec, policy: EngineNetworkPolicy) -> dict[str, Any]:
    (np,) = [o for o in children(s, policy) if o["kind"] == "NetworkPolicy"]
    return np


def pod_labels(s: LLMDeploymentSpec, component: str) -> dict[str, str]:
    (dep,) = [
        o
        for o in children(s, None)
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    labels: dict[str, str] = dep["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector as Kubernetes evaluates it (matchLabels, and matchExpressions with In)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def test_no_network_policy_unless_the_operator_is_told_to_render_one() -> None:
    assert [o for o in children(spec(**ROUTED), None) if o["kind"] == "NetworkPolicy"] == []


def test_the_policy_guards_this_deployments_engines_and_not_its_router() -> None:
    s = spec(**ROUTED)
    selector = network_policy(s, POLICY)["spec"]["podSelector"]
    assert selects(selector, pod_labels(s, "engine"))
    assert not selects(selector, pod_labels(s, "router"))
    other = Owner(name="other", namespace="team-a", uid="5678")
    other_engines = render_fleet(other, s, plan(s), FLEET).objects()
    assert not any(
        selects(selector, o["spec"]["template"]["metadata"]["labels"])
        for o in other_engines
        if o["kind"] == "Deployment"
    )


@pytest.mark.parametrize(
    ("overrides", "policy", "admitted"),
    [
        pytest.param(ROUTED, POLICY, "router+scrapers+operator", id="router-is-the-endpoint"),
        pytest.param(UNROUTED, POLICY, "anyone", id="engines-are-the-endpoint-no-clients-named"),
        pytest.param(
            UNROUTED,
            POLICY.model_copy(update={"clients": (CLIENT,)}),
            "clients+scrapers+operator",
            id="engines-are-the-endpoint-clients-named",
        ),
        pytest.param(
            ROUTED,
            POLICY.model_copy(update={"clients": (CLIENT,)}),
            "router+scrapers+operator",
            id="clients-go-through-the-router",
        ),
    ],
)
def test_who_may_reach_the_engines_port(
    overrides: dict[str, Any], policy: EngineNetworkPolicy, admitted: str
) -> None:
    s = spec(**overrides)
    (rule,) = network_policy(s, policy)["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    if admitted == "anyone":
        assert "from" not in rule
        return
    peers = rule["from"]
    parts = admitted.split("+")
    assert len(peers) == len(parts)
    for peer, part in zip(peers, parts, strict=True):
        if part == "router":
            # No namespaceSelector: the router of this namespace only.
            assert set(peer) == {"podSelector"}
            assert selects(peer["podSelector"], pod_labels(s, "router"))
            assert not selects(peer["podSelector"], pod_labels(s, "engine"))
        else:
            assert peer == {"clients": CLIENT, "scrapers": PROMETHEUS, "operator": OPERATOR}[part]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"scrapers": [{"podselector": {}}]}', "podselector"),
        ('{"clients": [{}]}', "nothing"),
        ('{"scraper": []}', "scraper"),
        ("not json", "Expecting value"),
    ],
)
def test_a_bad_flag_value_stops_the_operator_naming_the_flag(
    text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "--engine-network-policy", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--engine-network-policy" in err
    assert problem in err


def test_an_empty_flag_means_no_policy() -> None:
    assert parse_engine_network_policy("") is None
    assert (
        settings_from_args(
            build_parser().parse_args(["run", "--no-leader-election"])
        ).engine_network_policy
        is None
    )


def chart_policy(*set_args: str) -> EngineNetworkPolicy | None:
    docs = render(*set_args)
    args = operator_container(docs)["args"]
    cfg = settings_from_args(build_parser().parse_args(["run", *args]))
    return cfg.engine_network_policy


def test_the_chart_passes_nothing_by_default() -> None:
    assert chart_policy() is None


def test_the_chart_admits_its_own_operator_pods_and_the_configured_scrapers() -> None:
    docs = render(
        "engine.networkPolicy.enabled=true",
        "engine.networkPolicy.clients[0].podSelector.matchLabels.role=frontend",
    )
    args = operator_container(docs)["args"]
    policy = settings_from_args(build_parser().parse_args(["run", *args])).engine_network_policy
    assert policy is not None
    (operator,) = policy.operator
    pod = operator_deployment(docs)["spec"]["template"]["metadata"]
    assert selects(operator["podSelector"], pod["labels"])
    assert operator["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "llmfleet-system"}
    }
    assert policy.scrapers == (
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        },
    )
    assert policy.clients == ({"podSelector": {"matchLabels": {"role": "frontend"}}},)


def test_the_fetcher_admits_the_operator_only_even_where_the_engines_admit_anyone() -> None:
    # One LoRA engine, no router, no clients configured: the engine port admits every source,
    # and the fetcher's must still admit the operator alone.
    s = spec(**UNROUTED, engine={"lora": {}})
    rules = network_policy(s, POLICY)["spec"]["ingress"]
    fetcher = [r for r in rules if any(p["port"] == "fetcher" for p in r.get("ports", []))]

    assert fetcher == [{"from": [OPERATOR], "ports": [{"port": "fetcher", "protocol": "TCP"}]}]
    assert all("from" in r for r in rules if r not in fetcher and r["ports"][0]["port"] != "http")


def test_without_operator_peers_the_fetcher_port_gets_no_rule_at_all() -> None:
    s = spec(**UNROUTED, engine={"lora": {}})
    rules = network_policy(s, EngineNetworkPolicy(scrapers=(PROMETHEUS,)))["spec"]["ingress"]

    assert not any(p["port"] == "fetcher" for r in rules for p in r.get("ports", []))
    assert all("ports" in r for r in rules)  # no rule admits every port either


@pytest.mark.parametrize(
    ("layout", "lora", "clients", "open_to_all"),
    [
        # The OpenAI API alone: with no router and no clients, any client may call it.
        (UNROUTED, False, (), True),
        (UNROUTED, False, (CLIENT,), False),
        (ROUTED, False, (), False),
        # A LoRA engine's port also serves vLLM's runtime LoRA endpoints: never every source.
        (UNROUTED, True, (), False),
        (UNROUTED, True, (CLIENT,), False),
        (ROUTED, True, (), False),
    ],
)
def test_a_lora_engines_port_never_gets_a_rule_that_admits_every_source(
    layout: dict[str, Any], lora: bool, clients: tuple[dict[str, Any], ...], open_to_all: bool
) -> None:
    engine = {**layout.get("engine", {}), **({"lora": {}} if lora else {})}
    s = spec(**layout, engine=engine)
    policy = EngineNetworkPolicy(scrapers=(PROMETHEUS,), operator=(OPERATOR,), clients=clients)
    rules = network_policy(s, policy)["spec"]["ingress"]

    assert any("from" not in rule for rule in rules) == open_to_all
    if lora:
        for rule in rules:
            assert CLIENT not in rule.get("from", []) or clients == (CLIENT,)


@pytest.mark.parametrize(
    ("layout", "clients", "refused"),
    [
        (UNROUTED, (), True),
        (UNROUTED, (CLIENT,), False),
        (ROUTED, (), False),
    ],
)
def test_a_lora_deployment_its_policy_would_open_to_every_pod_is_not_planned(
    layout: dict[str, Any], clients: tuple[dict[str, Any], ...], refused: bool
) -> None:
    s = spec(**layout, engine={"lora": {}})
    policy = EngineNetworkPolicy(scrapers=(PROMETHEUS,), operator=(OPERATOR,), clients=clients)

    assert admits_every_source(s, plan(s), policy) == refused
