"""LLMDeployment against the API server alone: what admission refuses, and what the operator
writes for what it admits (no pod ever runs here; tests/e2e/test_llmdeployment.py runs them)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from kubernetes import client
from localcluster.operator_process import (
    OPERATOR_NAMESPACE,
    RELEASE,
    Operator,
    condition,
    get_llmd,
)
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import H100, apply, deployments, llmd

pytestmark = pytest.mark.cluster

# Each bad manifest is refused by the API server (schema/CEL), the message naming the field.
# (Those only the planner can tell: tests/e2e/test_llmdeployment.py.)
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("count-as-string", {"gpus": {**H100, "count": "eight"}}, "spec.gpus.count"),
    ("unknown-dtype", {"model": {"name": "x/y", "dtype": "int4"}}, "spec.model.dtype"),
    ("unknown-strategy", {"strategy": "Sideways"}, "spec.strategy"),
    ("zero-gpus", {"gpus": {**H100, "count": 0}}, "spec.gpus.count"),
    ("count-not-filling-nodes", {"gpus": {**H100, "count": 12}}, "spec.gpus.count"),
    (
        "min-above-max",
        {"autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
        "spec.autoscaling.maxReplicas",
    ),
    ("reserved-extra-arg", {"engine": {"extraArgs": ["--port", "9000"]}}, "spec.engine.extraArgs"),
    (
        "extra-arg-naming-another-model",
        {"engine": {"extraArgs": ["--model", "other/model"]}},
        "nor --model, --served-model-name, --revision",
    ),
    (
        "extra-args-starting-with-a-value",
        {"engine": {"extraArgs": ["8", "--max-num-seqs"]}},
        "extraArgs must start with a flag",
    ),
    (
        "product-not-a-label-value",
        {"gpus": {**H100, "product": "NVIDIA H100"}},
        "spec.gpus.product",
    ),
    ("model-name-with-a-space", {"model": {"name": "my model"}}, "spec.model.name"),
    (
        "pod-label-the-service-selects-by",
        {"engine": {"podLabels": {"app.kubernetes.io/component": "x"}}},
        "spec.engine.podLabels",
    ),
    (
        "pod-annotation-key-with-a-space",
        {"engine": {"podAnnotations": {"cost center": "ml"}}},
        "spec.engine.podAnnotations",
    ),
    ("model-id-not-ascii", {"model": {"name": "org/modèle"}}, "spec.model.name"),
    (
        "adapter-names-twice",
        {"adapters": [{"name": "sql", "source": "org/a"}, {"name": "sql", "source": "/b"}]},
        'spec.adapters: Invalid value: "object": adapters must have unique names',
    ),
    (
        "adapter-named-as-the-base",
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": "chat"},
            "adapters": [{"name": "chat", "source": "org/a"}],
        },
        'spec.adapters: Invalid value: "object": adapters must not be named as the base',
    ),
    (
        "adapter-from-azure",
        {"adapters": [{"name": "sql", "source": "azure://container/sql"}]},
        "spec.adapters[0].source",
    ),
    (
        "adapter-revision-of-s3",
        {"adapters": [{"name": "sql", "source": "s3://bucket/sql", "revision": "v2"}]},
        'spec.adapters[0].revision: Invalid value: "object": revision is for a Hugging Face '
        "repo id",
    ),
    (
        "lora-cpu-cache-below-the-default-slots",
        {"engine": {"lora": {"maxCpuAdapters": 2}}},
        'spec.engine.lora.maxCpuAdapters: Invalid value: "object": maxCpuAdapters must be '
        "at least maxAdapters",
    ),
    ("lora-rank-vllm-refuses", {"engine": {"lora": {"maxRank": 24}}}, "spec.engine.lora.maxRank"),
    (
        "kv-cache-dtype-not-offered",
        {"engine": {"kvCacheDtype": "int8"}},
        'spec.engine.kvCacheDtype: Unsupported value: "int8": supported values: "auto", '
        '"bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"',
    ),
    (
        # YAML 1.1 reads an unquoted off as false: the value is "disabled".
        "compile-cache-not-a-setting",
        {"engine": {"compileCache": "off"}},
        'spec.engine.compileCache: Unsupported value: "off": supported values: "auto", '
        '"podLocal", "disabled"',
    ),
    (
        "stall-window-shorter-than-a-poll-can-see",
        {"engine": {"stallDetection": {"windowSeconds": 2}}},
        "spec.engine.stallDetection.windowSeconds",
    ),
    (
        "standby-without-the-autoscaler",
        {"autoscaling": {"enabled": False, "standby": {"replicas": 1}}},
        'spec.autoscaling.standby.replicas: Invalid value: "object": standby.replicas needs '
        "the autoscaler",
    ),
    (
        "standby-with-scale-to-zero",
        {"autoscaling": {"minReplicas": 0, "standby": {"replicas": 1}}},
        "standby.replicas cannot go with minReplicas 0",
    ),
    (
        "standby-cooldown-too-short",
        {"autoscaling": {"standby": {"replicas": 1, "cooldownSeconds": 5}}},
        "spec.autoscaling.standby.cooldownSeconds",
    ),
]


@pytest.mark.parametrize(("case", "spec", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_manifest_is_refused_naming_the_field(
    cluster: Cluster, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    name = f"bad-{case}"[:50]
    with pytest.raises(subprocess.CalledProcessError) as err:
        apply(cluster, namespace, llmd(name, **spec))
    assert field in err.value.stderr, err.value.stderr


BAD_NAMES = {
    "longer-than-56": "a" * 57,
    "starts-with-a-digit": "1chat",
    "has-a-dot": "chat.v1",
}


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
def test_a_name_its_children_could_not_carry_is_refused_at_admission(
    cluster: Cluster, namespace: str, name: str
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as err:
        apply(cluster, namespace, llmd(name))
    assert "metadata.name must be at most 56 characters" in err.value.stderr, err.value.stderr


def test_the_longest_name_allowed_gets_every_child_including_the_router(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    name = "n" * 56
    apply(cluster, namespace, llmd(name, autoscaling={"minReplicas": 1, "maxReplicas": 3}))
    wait_until(
        lambda: (
            client.CoreV1Api(api)
            .list_namespaced_service(namespace, field_selector=f"metadata.name={name}-router")
            .items
        ),
        timeout=60,
        what="the router's Service",
    )
    assert condition(get_llmd(api, namespace, name), "Degraded").get("reason") != "ApplyRefused"


def test_extra_args_that_weaken_the_endpoint_are_allowed_with_one_warning(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    weak = ["--trust-remote-code", "--allowed-local-media-path", "/data"]
    apply(cluster, namespace, llmd("weak", engine={"extraArgs": weak}))

    def warnings() -> list[str]:
        return [
            e.message
            for e in client.CoreV1Api(api)
            .list_namespaced_event(namespace, field_selector="involvedObject.name=weak")
            .items
            if e.type == "Warning" and e.reason == "EndpointWeakened"
        ]

    (message,) = wait_until(warnings, timeout=60, what="a Warning Event EndpointWeakened")
    assert "--trust-remote-code" in message
    assert "--allowed-local-media-path" in message
    (engine,) = deployments(api, namespace)
    container = engine.spec.template.spec.containers[0]
    assert "--trust-remote-code" in (container.args or [])  # allowed, as asked
    time.sleep(12)  # two resyncs of the operator (every 5 s): the warning is not repeated
    assert len(warnings()) == 1


def test_an_extra_arg_the_pinned_vllm_does_not_know_is_refused_before_any_engine_exists(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    # vLLM 0.32 would take the abbreviation; the planner would not see it override --max-num-seqs.
    apply(cluster, namespace, llmd("typo", engine={"extraArgs": ["--max-num-seq=8"]}))

    def refused() -> dict[str, Any] | None:
        planned = condition(get_llmd(api, namespace, "typo"), "Planned")
        return planned if planned.get("status") == "False" else None

    planned = wait_until(refused, timeout=60, what="Planned=False")
    assert planned["reason"] == "UnknownEngineFlag"
    assert planned["message"].startswith("spec.engine.extraArgs: --max-num-seq is not a whole flag")
    assert "did you mean --max-num-seqs?" in planned["message"]
    warnings = wait_until(
        lambda: [
            e.message
            for e in client.CoreV1Api(api)
            .list_namespaced_event(namespace, field_selector="involvedObject.name=typo")
            .items
            if e.type == "Warning" and e.reason == "UnknownEngineFlag"
        ],
        timeout=30,
        what="a Warning Event UnknownEngineFlag",
    )
    assert "--max-num-seq " in warnings[0]
    time.sleep(6)  # a resync of the operator (every 5 s): still nothing to run
    assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items == []


def test_adapters_are_admitted_and_the_engines_start_with_lora(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    adapters = [
        {"name": "sql", "source": "org/sql-lora"},
        {"name": "support", "source": "/models/adapters/support"},
    ]
    apply(cluster, namespace, llmd("lora", engine={"lora": {"maxAdapters": 2}}, adapters=adapters))

    engines = wait_until(
        lambda: deployments(api, namespace), timeout=60, what="the engine Deployments"
    )
    for engine in engines:
        args = engine.spec.template.spec.containers[0].args or []
        assert "--enable-lora" in args
        assert args[args.index("--max-loras") + 1 : args.index("--max-loras") + 4] == [
            "2",
            "--max-lora-rank",
            "16",
        ]

    # The fetchers' token: a Secret the operator created with the chart's RBAC (create, no get
    # here), owned by the LLMDeployment, and read by the fetcher container alone.
    core = client.CoreV1Api(api)
    secret = wait_until(
        lambda: _secret(core, namespace, "lora-fetcher"), timeout=30, what="the fetcher Secret"
    )
    (owner,) = secret.metadata.owner_references
    assert (owner.kind, owner.name) == ("LLMDeployment", "lora")
    assert set(secret.data) == {"token"}
    for engine in engines:
        env = {
            c.name: [e.value_from.secret_key_ref.name for e in c.env or [] if e.value_from
                     and e.value_from.secret_key_ref]
            for c in engine.spec.template.spec.containers
        }  # fmt: skip
        assert "lora-fetcher" in env["adapter-fetcher"]
        assert "lora-fetcher" not in env["vllm"]
    assert _secret(core, OPERATOR_NAMESPACE, f"{RELEASE}-fetcher-key") is not None


def _secret(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Secret | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_kubectl_explain_describes_the_fields(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "llmd.spec.gpus")
    for field in ("count", "memoryGiB", "perNode", "product"):
        assert field in out
    assert "tensor" in out.lower()
    # A field new in 0.2.0: the chart (tests/api/conftest.py) installed the current CRD.
    assert "rolls" in cluster.kubectl("explain", "llmd.spec.engine.podLabels")
    assert "OpenAI" in cluster.kubectl("explain", "llmd.spec.adapters.name")
    lora = " ".join(cluster.kubectl("explain", "llmd.spec.engine.lora").split())
    assert "restarts the engines once" in lora
    extra = " ".join(cluster.kubectl("explain", "llmd.spec.engine.extraArgs").split())
    assert "(vllm serve MODEL ...), the first item a flag" in extra
    assert "does not know (misspelt, removed, or abbreviated)" in extra
    kv = " ".join(cluster.kubectl("explain", "llmd.spec.engine.kvCacheDtype").split())
    assert "store 1 byte per element, so the cache holds twice the tokens" in kv
    stall = " ".join(
        cluster.kubectl("explain", "llmd.spec.engine.stallDetection.windowSeconds").split()
    )
    assert "1000 times the predicted inter-token latency" in stall
    compile_cache = " ".join(cluster.kubectl("explain", "llmd.spec.engine.compileCache").split())
    assert "keyed by the engine image, the model, the GPU type and vLLM's" in compile_cache
    quantization = " ".join(cluster.kubectl("explain", "llmd.spec.model.quantization").split())
    assert "none serves the checkpoint as it is" in quantization
