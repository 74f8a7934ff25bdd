"""The vLLM Router an LLMDeployment renders: when it is on, what it discovers, what it may read,
and that the operator (and its chart RBAC) can create and prune all of it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from chartrbac import beside_the_operator_rules, granted
from chartrender import of_kind, render
from cliargs import flag

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.router import DEFAULT_ROUTER_IMAGE
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.fleet import MANAGED_KINDS
from llmfleet.render.router import router_enabled, router_url
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
H100 = {"count": 8, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
ROUTER_KINDS = {"ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"}


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}
    body.update(overrides)
    return LLMDeploymentSpec.model_validate(body)


def router_objects(s: LLMDeploymentSpec) -> dict[str, dict[str, Any]]:
    return {
        o["kind"]: o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
        if o["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
    }


def engine_pod(s: LLMDeploymentSpec) -> dict[str, Any]:
    (dep,) = [
        o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
    ]
    pod: dict[str, Any] = dep["spec"]["template"]
    return pod


def router_pod(s: LLMDeploymentSpec) -> dict[str, Any]:
    pod: dict[str, Any] = router_objects(s)["Deployment"]["spec"]["template"]
    return pod


@pytest.mark.parametrize(
    ("overrides", "enabled"),
    [
        pytest.param({}, True, id="autoscaled-max-above-1"),
        pytest.param({"autoscaling": {"minReplicas": 1, "maxReplicas": 1}}, False, id="max-1"),
        pytest.param({"autoscaling": {"enabled": False}}, True, id="fixed-8-replicas"),
        pytest.param(
            {"objective": "Latency", "autoscaling": {"enabled": False}}, False, id="fixed-1"
        ),
        pytest.param(
            {"autoscaling": {"maxReplicas": 1, "minReplicas": 1}, "router": {"enabled": True}},
            True,
            id="forced-on-for-one-pod",
        ),
        pytest.param({"router": {"enabled": False}}, False, id="forced-off"),
    ],
)
def test_router_is_on_by_default_exactly_when_the_fleet_can_have_several_pods(
    overrides: dict[str, Any], enabled: bool
) -> None:
    s = spec(**overrides)
    assert router_enabled(s, plan(s)) is enabled
    assert set(router_objects(s)) == (ROUTER_KINDS if enabled else set())


def test_router_discovers_exactly_this_deployments_engine_pods_in_its_namespace() -> None:
    s = spec()
    (c, _hop) = router_pod(s)["spec"]["containers"]
    args = c["args"]
    assert c["command"] == ["vllm-router"]
    assert "--service-discovery" in args
    assert flag(args, "--service-discovery-namespace") == ["team-a"]
    assert flag(args, "--service-discovery-port") == ["8000"]
    selector = dict(kv.split("=", 1) for kv in flag(args, "--selector"))
    # The engine pods' own labels select them, and nothing else carries both.
    assert selector == {"llmfleet.dev/deployment": "chat", "app.kubernetes.io/component": "engine"}
    engine_labels = engine_pod(s)["metadata"]["labels"]
    assert selector.items() <= engine_labels.items()
    assert not selector.items() <= router_pod(s)["metadata"]["labels"].items()
    assert flag(args, "--policy") == ["power_of_two"]
    # Behind the router hop, which takes the Service's port (test_routerhop_render.py).
    assert flag(args, "--host") == ["127.0.0.1"]
    assert flag(args, "--port") == ["8001"]
    assert "--worker-urls" not in args


@pytest.mark.parametrize("policy", ["round_robin", "cache_aware", "consistent_hash", "random"])
def test_policy_is_passed_through(policy: str) -> None:
    args = router_pod(spec(router={"policy": policy}))["spec"]["containers"][0]["args"]
    assert flag(args, "--policy") == [policy]


@pytest.mark.parametrize(
    ("policy", "max_num_seqs", "threshold"),
    [
        ("cache_aware", 2, "4"),
        ("cache_aware", 64, "16"),
        ("cache_aware", 256, "64"),
        ("power_of_two", 256, None),
        ("round_robin", 256, None),
    ],
    ids=[
        "few-slot-engines-balance-at-4",
        "a-quarter-of-the-batch",
        "upstreams-64-for-256-sequences",
        "power-of-two-untuned",
        "round-robin-untuned",
    ],
)
def test_cache_aware_balances_at_a_quarter_of_the_batch_and_no_other_policy_is_tuned(
    policy: str, max_num_seqs: int, threshold: str | None
) -> None:
    s = spec(router={"policy": policy}, engine={"maxNumSeqs": max_num_seqs})
    args = router_pod(s)["spec"]["containers"][0]["args"]
    # Upstream's 64 never fires with engines of a few slots (docs/router.md, router_prefix bench).
    if threshold is not None:
        assert flag(args, "--balance-abs-threshold") == [threshold]
    else:
        assert "--balance-abs-threshold" not in args
    # The rest of cache_aware's settings stay upstream's.
    untouched = {"--cache-threshold", "--balance-rel-threshold", "--eviction-interval-secs"}
    assert not untouched & set(args)


@pytest.mark.parametrize(
    "autoscaling",
    [{}, {"minReplicas": 0, "maxReplicas": 2}],
    ids=["fixed-attempts", "scale-to-zero-hold"],
)
def test_a_dead_engines_circuit_opens_before_a_request_spends_its_attempts_on_it(
    autoscaling: dict[str, Any],
) -> None:
    # power_of_two sends every retry to a crashed engine with nothing in flight (it looks least
    # loaded) until its circuit opens; the request must have attempts left for another engine.
    args = router_pod(spec(autoscaling=autoscaling))["spec"]["containers"][0]["args"]
    (opens_after,) = flag(args, "--cb-failure-threshold")
    (attempts,) = flag(args, "--retry-max-retries")
    assert int(opens_after) < int(attempts)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        spec(router={"policy": "least_busy"})


def test_router_role_reads_pods_in_its_namespace_and_nothing_else() -> None:
    objs = router_objects(spec())
    account, role, binding = objs["ServiceAccount"], objs["Role"], objs["RoleBinding"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert role["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "team-a"}
    ]
    pod = router_pod(spec())["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    # The engines need no API access and get no token.
    assert engine_pod(spec())["spec"]["automountServiceAccountToken"] is False


def test_router_service_is_the_endpoint_and_the_engine_service_stays() -> None:
    s = spec()
    services = {
        o["metadata"]["name"]: o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
        if o["kind"] == "Service"
    }
    assert set(services) == {"chat", "chat-router"}
    assert services["chat-router"]["spec"]["selector"] == {
        "llmfleet.dev/deployment": "chat",
        "app.kubernetes.io/component": "router",
    }
    assert services["chat"]["spec"]["selector"]["app.kubernetes.io/component"] == "engine"
    assert router_url(OWNER) == "http://chat-router.team-a.svc:8000/v1"


def test_router_pod_runs_beside_its_engines_without_a_gpu_and_is_scraped() -> None:
    s = spec()
    pod, engine = router_pod(s), engine_pod(s)
    assert pod["spec"]["nodeSelector"] == engine["spec"]["nodeSelector"]
    assert pod["spec"]["tolerations"] == engine["spec"]["tolerations"]
    (c, hop) = pod["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(c["resources"]) + str(hop["resources"])
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"}}
    assert pod["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "29000",
        "prometheus.io/path": "/metrics",
    }
    # The hop serves its metrics and vllm-router's (read from loopback) on the scraped port.
    assert flag(c["args"], "--prometheus-host") == ["127.0.0.1"]
    assert {p["name"]: p["containerPort"] for p in hop["ports"]} == {
        "http": 8000,
        "metrics": 29000,
    }
    assert hop["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_cpu_only_router_has_no_gpu_toleration() -> None:
    pod = router_pod(spec(gpus=None))["spec"]
    assert "tolerations" not in pod
    assert "nodeSelector" not in pod


def test_replicas_image_and_resources_come_from_the_spec() -> None:
    s = spec(
        router={
            "replicas": 2,
            "image": "registry.example/router:1",
            "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}},
        }
    )
    dep = router_objects(s)["Deployment"]
    assert dep["spec"]["replicas"] == 2
    (c, _hop) = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "registry.example/router:1"
    assert c["resources"] == {
        "requests": {"cpu": "2", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert router_objects(spec())["Deployment"]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == ("docker.io/llmfleet/vllm-router:0.1.17")


def test_router_children_are_owned_labelled_and_deterministic() -> None:
    s = spec()
    assert (
        render_fleet(OWNER, s, plan(s), FLEET).objects()
        == render_fleet(OWNER, s, plan(s), FLEET).objects()
    )
    for obj in router_objects(s).values():
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "1234"
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmfleet"
        assert obj["metadata"]["name"] == "chat-router"
    kinds = [o["kind"] for o in render_fleet(OWNER, s, plan(s), FLEET).objects()]
    # What others refer to is applied first: the account and its Role before the pods.
    assert kinds.index("RoleBinding") < kinds.index("Deployment")


def test_every_rendered_kind_is_pruned() -> None:
    s = spec(router={"enabled": True})
    rendered = {
        (o["apiVersion"], o["kind"]) for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
    }
    assert rendered <= set(MANAGED_KINDS)


def test_chart_rbac_lets_the_operator_manage_the_router_and_grant_its_role() -> None:
    (role,) = of_kind([d for d in render() if not beside_the_operator_rules(d)], "ClusterRole")
    rules = granted(role)
    for resource, group in (
        ("serviceaccounts", ""),
        ("roles", "rbac.authorization.k8s.io"),
        ("rolebindings", "rbac.authorization.k8s.io"),
    ):
        # list/watch (the operator's view), create/patch (server-side apply), delete (prune).
        assert rules[(group, resource)] == {"get", "list", "watch", "create", "patch", "delete"}
    # RBAC escalation check: the operator may only grant what it holds itself.
    router_role = router_objects(spec())["Role"]
    for rule in router_role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert set(rule["verbs"]) <= rules[(group, resource)]
    # No escalate/bind shortcut.
    assert not any({"escalate", "bind"} & verbs for verbs in rules.values())


def test_default_router_image_is_the_locked_vllm_router() -> None:
    repo = Path(__file__).resolve().parents[2]
    lock = (repo / "dev" / "dataplane" / "vllm-router.lock").read_text()
    (version,) = re.findall(r"^vllm-router==(\S+)$", lock, re.MULTILINE)
    assert DEFAULT_ROUTER_IMAGE.endswith(f":{version}")
    dockerfile = (repo / "images" / "router" / "Dockerfile").read_text()
    assert "dev/dataplane/vllm-router.lock" in dockerfile
    assert f"-t {DEFAULT_ROUTER_IMAGE} " in dockerfile
