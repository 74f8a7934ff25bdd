"""The manifests one LLMDeployment renders: deterministic, owned, and shaped for the HPA."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.names import ENGINE_NAME_SUFFIX_PATTERN
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
# Every fleet that can have more than one pod gets the vLLM Router (tests/unit/test_router_*.py).
ROUTER = {
    f"{kind}/chat-router"
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Service", "Deployment")
}
H100 = {"count": 8, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}


def spec(**overrides: Any) -> LLMDeploymentSpec:
    body: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}
    body.update(overrides)
    return LLMDeploymentSpec.model_validate(body)


def rendered(s: LLMDeploymentSpec) -> dict[str, dict[str, Any]]:
    return {
        f"{o['kind']}/{o['metadata']['name']}": o
        for o in render_fleet(OWNER, s, plan(s), FLEET).objects()
    }


def engine(s: LLMDeploymentSpec) -> dict[str, Any]:
    (dep,) = [
        o
        for o in rendered(s).values()
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
    ]
    return dep


def container(s: LLMDeploymentSpec) -> dict[str, Any]:
    c: dict[str, Any] = engine(s)["spec"]["template"]["spec"]["containers"][0]
    return c


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {},
            {
                "Service/chat",
                "Deployment/chat-tp1",
                "HorizontalPodAutoscaler/chat",
                "PodDisruptionBudget/chat",
                *ROUTER,
            },
            id="multi-pod-autoscaled-gets-hpa-and-pdb",
        ),
        pytest.param(
            {"autoscaling": {"enabled": False}},
            {"Service/chat", "Deployment/chat-tp1", "PodDisruptionBudget/chat", *ROUTER},
            id="autoscaling-off-has-no-hpa",
        ),
        pytest.param(
            {"objective": "Latency"},
            {"Service/chat", "Deployment/chat-tp8", "HorizontalPodAutoscaler/chat", *ROUTER},
            id="single-pod-has-no-pdb",
        ),
        pytest.param(
            {"gpus": None},
            {"Service/chat", "Deployment/chat-cpu", "HorizontalPodAutoscaler/chat", *ROUTER},
            id="cpu-only-layout",
        ),
    ],
)
def test_children_rendered_for_each_layout(overrides: dict[str, Any], expected: set[str]) -> None:
    assert set(rendered(spec(**overrides))) == expected


def test_render_is_deterministic_and_every_child_is_owned_and_labelled() -> None:
    s = spec()
    assert (
        render_fleet(OWNER, s, plan(s), FLEET).objects()
        == render_fleet(OWNER, s, plan(s), FLEET).objects()
    )
    for obj in render_fleet(OWNER, s, plan(s), FLEET).objects():
        (ref,) = obj["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMDeployment",
            "name": "chat",
            "uid": "1234",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        labels = obj["metadata"]["labels"]
        assert labels["llmfleet.dev/deployment"] == "chat"
        assert labels["app.kubernetes.io/managed-by"] == "llmfleet"
        assert obj["metadata"]["namespace"] == "team-a"


@pytest.mark.parametrize(
    ("autoscaling", "replicas"),
    [
        pytest.param({"enabled": True}, None, id="hpa-owns-replicas"),
        pytest.param({"enabled": False}, 8, id="fixed-replicas-rendered"),
    ],
)
def test_deployment_replicas_only_without_hpa(
    autoscaling: dict[str, Any], replicas: int | None
) -> None:
    assert engine(spec(autoscaling=autoscaling))["spec"].get("replicas") == replicas


def test_engine_runs_the_planned_vllm_args_on_the_planned_gpus() -> None:
    s = spec(objective="Latency")
    p = plan(s)
    c = container(s)
    assert c["command"] == ["vllm", "serve"]
    assert c["args"] == [
        s.model.name,
        *p.vllm_args,
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--shutdown-timeout",
        "90",
    ]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    pod = engine(s)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{p.shm_size_gib}Gi"}
    assert pod["enableServiceLinks"] is False


def test_probes_give_big_models_longer_to_start() -> None:
    small = container(spec())["startupProbe"]
    big = container(spec(model={"name": "meta-llama/Llama-3.1-70B-Instruct"}))["startupProbe"]
    assert big["failureThreshold"] > small["failureThreshold"]
    assert small["httpGet"] == {"path": "/health", "port": "http"}


def test_an_engine_is_ready_within_two_seconds_of_answering_its_health_check() -> None:
    """The startup probe's period is the most a started engine waits to be Ready (routed, and
    counted by the HPA): it was 10 s, 5 s on average added to every engine's start."""
    for s in (spec(), spec(model={"name": "meta-llama/Llama-3.1-70B-Instruct"})):
        startup = container(s)["startupProbe"]
        assert startup["periodSeconds"] <= 2
        assert "initialDelaySeconds" not in startup


def test_drain_on_shutdown() -> None:
    s = spec()
    pod = engine(s)["spec"]["template"]["spec"]
    assert pod["containers"][0]["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    assert pod["terminationGracePeriodSeconds"] > 10
    # vLLM gets the rest of the grace period to finish in-flight requests after SIGTERM.
    args = pod["containers"][0]["args"]
    timeout = int(args[args.index("--shutdown-timeout") + 1])
    assert 10 + timeout < pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize(
    ("model", "env_name", "secret"),
    [
        pytest.param(
            {"tokenSecretRef": {"name": "hf", "key": "token"}},
            "HF_TOKEN",
            {"name": "hf", "key": "token"},
            id="gated-model-token",
        ),
    ],
)
def test_secrets_become_env_from_secret_refs(
    model: dict[str, Any], env_name: str, secret: dict[str, str]
) -> None:
    s = spec(
        model={"name": "meta-llama/Llama-3.1-8B-Instruct", **model},
        engine={"apiKeySecretRef": {"name": "api", "key": "key"}},
    )
    env = {e["name"]: e for e in container(s)["env"]}
    assert env[env_name]["valueFrom"]["secretKeyRef"] == secret
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "api", "key": "key"}


@pytest.mark.parametrize(
    ("cache", "volume"),
    [
        pytest.param(
            {"claimName": "hf"},
            {"persistentVolumeClaim": {"claimName": "hf"}},
            id="pvc-cache-survives-restarts",
        ),
        pytest.param(None, {"emptyDir": {}}, id="no-cache-uses-emptydir"),
    ],
)
def test_model_cache_volume(cache: dict[str, str] | None, volume: dict[str, Any]) -> None:
    model: dict[str, Any] = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
    if cache:
        model["cache"] = cache
    pod = engine(spec(model=model))["spec"]["template"]["spec"]
    hf = next(v for v in pod["volumes"] if v["name"] == "hf-cache")
    assert {k: v for k, v in hf.items() if k != "name"} == volume


def test_hpa_scales_on_queue_depth_fast_up_stabilised_down() -> None:
    s = spec(
        autoscaling={"maxReplicas": 12, "targetQueueDepth": 3, "scaleDownStabilizationSeconds": 120}
    )
    hpa = rendered(s)["HorizontalPodAutoscaler/chat"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "chat-tp1"
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (8, 12)
    (metric,) = hpa["metrics"]
    assert metric["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "3"}
    assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 120


@pytest.mark.parametrize(
    "router",
    [
        pytest.param({"enabled": True}, id="router-on"),
        pytest.param({"enabled": False}, id="no-router"),
    ],
)
def test_the_hpa_reads_only_the_engines_queue_metric_whether_or_not_a_router_holds_requests(
    router: dict[str, Any],
) -> None:
    """The router hop's held requests are folded into the engines' queue metric by the adapter
    rule (test_adapter_queue_query.py): a separate metric on the routers would fail the whole HPA
    wherever the routers are not scraped."""
    s = spec(autoscaling={"maxReplicas": 12}, router=router)
    hpa = rendered(s)["HorizontalPodAutoscaler/chat"]["spec"]
    assert [(m["type"], m["pods"]["metric"]["name"]) for m in hpa["metrics"]] == [
        ("Pods", "vllm_num_requests_waiting")
    ]


@pytest.mark.parametrize(
    ("overrides", "seqs", "target"),
    [
        # 8B on an 80 GiB H100: 446,784 KV tokens // (512 + 256) = 581, capped at 512 sequences.
        pytest.param({}, 512, "128", id="gpu-pod-at-the-512-sequence-cap"),
        # opt-125m on the default 4 GiB CPU KV cache: 116,496 tokens // 768 = 151 sequences.
        pytest.param(
            {"gpus": None, "model": {"name": "facebook/opt-125m"}}, 151, "38", id="cpu-pod"
        ),
    ],
)
def test_hpa_target_defaults_to_a_quarter_of_the_planned_concurrency(
    overrides: dict[str, Any], seqs: int, target: str
) -> None:
    s = spec(**overrides)
    result = plan(s)
    assert s.autoscaling.target_queue_depth is None
    assert result.max_concurrent_sequences == seqs
    assert result.target_queue_depth == int(target)  # ceil(seqs / 4)
    (metric,) = rendered(s)["HorizontalPodAutoscaler/chat"]["spec"]["metrics"]
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": target}


def test_service_spans_every_layout_of_the_deployment() -> None:
    svc = rendered(spec())["Service/chat"]["spec"]
    assert svc["selector"] == {
        "llmfleet.dev/deployment": "chat",
        "app.kubernetes.io/component": "engine",
    }
    assert svc["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_cpu_only_serving_sizes_kv_cache_and_memory() -> None:
    s = spec(gpus=None, engine={"cpuKVCacheGiB": 6}, model={"name": "facebook/opt-125m"})
    c = container(s)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "6"
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})
    assert c["resources"]["requests"]["memory"].endswith("Gi")


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="tensor-parallel"),
        pytest.param({"gpus": None, "model": {"name": "facebook/opt-125m"}}, id="cpu"),
    ],
)
def test_the_dashboards_pattern_finds_engine_deployments_of_every_layout(
    overrides: dict[str, Any],
) -> None:
    names = {
        o["metadata"]["name"]: o["metadata"]["labels"]["app.kubernetes.io/component"]
        for o in rendered(spec(**overrides)).values()
        if o["kind"] == "Deployment"
    }
    pattern = re.compile(f"chat{ENGINE_NAME_SUFFIX_PATTERN}")
    assert {n for n in names if pattern.fullmatch(n)} == {
        n for n, component in names.items() if component == "engine"
    }
