"""What a multi-node layout renders: one LeaderWorkerSet whose groups are the replicas (a leader
and its workers, one pod per node), vLLM's own multi-node launcher in both, and every selector
that means "the engines that serve" (Service, router, HPA, PlanVerified) seeing leaders only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chartrbac import beside_the_operator_rules, granted
from chartrender import of_kind, render

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.names import MAX_GROUPED_NAME, engine_deployment_name
from llmfleet.render.router import router_args
from llmfleet.settings import OperatorSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama-3.1-405b-2x8xh100.yaml"
OWNER = Owner(name="llama-405b", namespace="ml", uid="u-1")


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body = yaml.safe_load(EXAMPLE.read_text())["spec"]
    body.update(overrides)
    return LLMDeploymentSpec.model_validate(body)


def children(s: LLMDeploymentSpec, owner: Owner = OWNER, **kw: Any) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o
        for o in render_fleet(owner, s, plan(s), OperatorSettings(**kw).fleet).objects()
    }


def lws(s: LLMDeploymentSpec) -> dict[str, Any]:
    (obj,) = [o for o in children(s).values() if o["kind"] == "LeaderWorkerSet"]
    return obj


def templates(s: LLMDeploymentSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    t = lws(s)["spec"]["leaderWorkerTemplate"]
    return t["leaderTemplate"], t["workerTemplate"]


def after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_a_replica_over_two_nodes_is_one_group_of_a_leader_and_a_worker() -> None:
    s = spec()
    kinds = sorted(o["kind"] for o in children(s).values())
    assert "Deployment" not in kinds  # no engine Deployment, and no router at one replica
    obj = lws(s)
    assert obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    template = obj["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    for pod in templates(s):
        (c,) = pod["spec"]["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"  # one node's GPUs, not 16
        assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_leader_and_worker_start_vllms_multi_node_launcher() -> None:
    leader, worker = templates(spec())
    (lc,) = leader["spec"]["containers"]
    (wc,) = worker["spec"]["containers"]
    for args, rank in ((lc["args"], "0"), (wc["args"], "$(LWS_WORKER_INDEX)")):
        assert after(args, "--tensor-parallel-size") == "8"
        assert after(args, "--pipeline-parallel-size") == "2"
        assert after(args, "--nnodes") == "2"
        assert after(args, "--node-rank") == rank
        assert after(args, "--master-addr") == "$(LWS_LEADER_ADDRESS)"
        assert after(args, "--master-port") == "29500"
    # The leader serves the API, is probed and drains; the worker is headless.
    assert after(lc["args"], "--port") == "8000"
    assert "--headless" not in lc["args"]
    assert "readinessProbe" in lc
    assert "preStop" in lc["lifecycle"]
    assert "--headless" in wc["args"]
    # Only `vllm serve` honours --headless; the OpenAI server module would start an engine.
    assert lc["command"] == wc["command"] == ["vllm", "serve"]
    assert lc["args"][0] == wc["args"][0] == spec().model.name
    assert "--port" not in wc["args"]
    assert not {"readinessProbe", "startupProbe", "livenessProbe", "ports"} & set(wc)


def test_only_leaders_are_engines_to_the_service_router_and_plan_check() -> None:
    s = spec(gpus={"count": 32, "perNode": 8, "profile": "h100-80gb"}, autoscaling={})
    objs = children(s)
    leader, worker = templates(s)
    service = objs[f"Service/{OWNER.name}"]["spec"]["selector"]
    assert matches(service, leader["metadata"]["labels"])
    assert not matches(service, worker["metadata"]["labels"])
    selector = router_args(OWNER, s, plan(s))
    pairs = dict(a.split("=", 1) for a in selector[selector.index("--selector") + 1 :] if "=" in a)
    assert matches(pairs, leader["metadata"]["labels"])
    assert not matches(pairs, worker["metadata"]["labels"])
    # Workers expose no metrics: Prometheus is told to scrape leaders only.
    assert leader["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert "annotations" not in worker["metadata"]


def test_the_hpa_scales_groups_through_the_leaderworkerset() -> None:
    s = spec(gpus={"count": 32, "perNode": 8, "profile": "h100-80gb"}, autoscaling={})
    objs = children(s)
    hpa = objs[f"HorizontalPodAutoscaler/{OWNER.name}"]
    name = lws(s)["metadata"]["name"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": name,
    }
    assert hpa["spec"]["maxReplicas"] == 2  # 32 GPUs make two groups of 16
    assert "replicas" not in lws(s)["spec"]  # the HPA owns it
    fixed = spec(autoscaling={"enabled": False})
    assert lws(fixed)["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("count", "budget"),
    [pytest.param(16, False, id="one-group-no-budget"), pytest.param(32, True, id="two-groups")],
)
def test_a_disruption_budget_spans_every_pod_of_every_group(count: int, budget: bool) -> None:
    s = spec(
        gpus={"count": count, "perNode": 8, "profile": "h100-80gb"},
        autoscaling={"minReplicas": count // 16, "maxReplicas": count // 16},
    )
    pdbs = [o for o in children(s).values() if o["kind"] == "PodDisruptionBudget"]
    assert bool(pdbs) is budget
    if budget:
        (pdb,) = pdbs
        assert pdb["spec"]["maxUnavailable"] == 1
        selector = pdb["spec"]["selector"]["matchLabels"]
        for pod in templates(s):
            assert matches(selector, pod["metadata"]["labels"])


def test_the_network_policy_guards_workers_and_lets_a_group_talk_within() -> None:
    s = spec()
    (np,) = [
        o
        for o in children(s, engine_network_policy=EngineNetworkPolicy()).values()
        if o["kind"] == "NetworkPolicy"
    ]
    selector = np["spec"]["podSelector"]
    (expr,) = selector["matchExpressions"]
    for pod in templates(s):
        labels = pod["metadata"]["labels"]
        assert matches(selector["matchLabels"], labels)
        assert labels[expr["key"]] in expr["values"]
    _api, group = np["spec"]["ingress"]
    assert "ports" not in group  # whatever ports NCCL and vLLM pick
    (peer,) = group["from"]
    for pod in templates(s):
        assert matches(peer["podSelector"]["matchLabels"], pod["metadata"]["labels"])


def test_the_longest_name_still_makes_statefulset_names_kubernetes_accepts() -> None:
    p = plan(spec())
    long_a, long_b = "a" * 55 + "x", "a" * 55 + "y"
    names = {engine_deployment_name(n, p) for n in (long_a, long_b)}
    assert len(names) == 2  # no two LLMDeployments share a LeaderWorkerSet
    for name in names:
        assert len(name) <= MAX_GROUPED_NAME
        assert name.endswith("-tp8-pp2")
    assert engine_deployment_name("llama-405b", p) == "llama-405b-tp8-pp2"


def test_the_launcher_flags_are_the_operators() -> None:
    with pytest.raises(ValueError, match="--nnodes"):
        spec(engine={"extraArgs": ["--nnodes=3"]})
    with pytest.raises(ValueError, match="--headless"):
        spec(engine={"extraArgs": ["--headless"]})


def test_the_chart_lets_the_operator_manage_leaderworkersets() -> None:
    docs = [d for d in render() if not beside_the_operator_rules(d)]
    (role,) = of_kind(docs, "ClusterRole")
    verbs = granted(role)[("leaderworkerset.x-k8s.io", "leaderworkersets")]
    assert {"get", "list", "watch", "create", "patch", "delete"} <= verbs
