"""LLMDeployment end to end: the real operator process against the real local control plane."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION

from .harness import E2E_GPU_PRODUCT, Operator, condition, get_llmd, utcnow, wait_until

pytestmark = pytest.mark.cluster

H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": E2E_GPU_PRODUCT}


def llmd(name: str, **spec: Any) -> dict[str, Any]:
    body = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": dict(H100)}
    body.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMDeployment",
        "metadata": {"name": name},
        "spec": body,
    }


def apply(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))


def wait_available(
    api: client.ApiClient, namespace: str, name: str, timeout: float = 60
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = get_llmd(api, namespace, name)
        st = obj.get("status") or {}
        ok = (
            condition(obj, "Available").get("status") == "True"
            and condition(obj, "Progressing").get("status") == "False"
            and st.get("observedGeneration") == obj["metadata"]["generation"]
        )
        return obj if ok else None

    result: dict[str, Any] = wait_until(ready, timeout=timeout, what=f"{name} Available and stable")
    return result


def deployments(api: client.ApiClient, namespace: str) -> list[client.V1Deployment]:
    """The engine Deployments (not the vLLM Router's, which multi-pod fleets also get)."""
    items: list[client.V1Deployment] = (
        client.AppsV1Api(api)
        .list_namespaced_deployment(namespace, label_selector="app.kubernetes.io/component=engine")
        .items
    )
    return items


def test_apply_creates_owned_children_on_gpu_nodes_and_reports_the_plan(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("chat", autoscaling={"maxReplicas": 4}))
    obj = wait_available(api, namespace, "chat")
    uid = obj["metadata"]["uid"]

    status = obj["status"]
    assert status["plan"]["strategy"] == "MultiPod"
    assert status["plan"]["tensorParallelSize"] == 1
    assert status["readyReplicas"] == 2
    assert status["gpus"] == 2
    # maxReplicas 4: the vLLM Router fronts the engines and is the endpoint (docs/router.md).
    assert status["endpoint"] == f"http://chat-router.{namespace}.svc:8000/v1"
    assert condition(obj, "Planned")["status"] == "True"
    assert "GPU" in condition(obj, "Planned")["message"]

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    dep = apps.read_namespaced_deployment("chat-tp1", namespace)
    svc = core.read_namespaced_service("chat", namespace)
    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("chat", namespace)
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("chat", namespace)
    for child in (dep, svc, hpa, pdb):
        (ref,) = child.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("LLMDeployment", "chat", uid, True)
        assert child.metadata.labels["llmfleet.dev/deployment"] == "chat"
        assert child.metadata.labels["app.kubernetes.io/managed-by"] == "llmfleet"
    # The HPA owns replicas, so the rendered Deployment carries none of its own.
    managed = [f for f in dep.metadata.managed_fields if f.manager == "llmfleet-operator"]
    assert managed
    assert all("f:replicas" not in json.dumps(f.fields_v1.get("f:spec", {})) for f in managed)
    assert hpa.spec.metrics[0].pods.metric.name == "vllm_num_requests_waiting"
    # The default target is a quarter of the planned concurrency per pod (ceil(maxNumSeqs / 4)).
    seqs = status["plan"]["maxConcurrentSequences"]
    assert hpa.spec.metrics[0].pods.target.average_value == str(-(-seqs // 4))
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 4)

    engines = "llmfleet.dev/deployment=chat,app.kubernetes.io/component=engine"
    pods = core.list_namespaced_pod(namespace, label_selector=engines).items
    assert len(pods) == 2
    for p in pods:
        assert p.status.phase == "Running"
        node = core.read_node(p.spec.node_name)
        assert node.metadata.labels["nvidia.com/gpu.product"] == E2E_GPU_PRODUCT
        assert p.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"

    table = cluster.kubectl("get", "llmd", "-n", namespace)
    header, row = table.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "STRATEGY",
        "REPLICAS",
        "READY",
        "GPUS",
        "AVAILABLE",
        "REASON",
        "AGE",
    ]
    assert row.split()[:7] == ["chat", "MultiPod", "2", "2", "2", "True", "EnginesReady"]


def test_idle_resync_makes_zero_api_writes(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("idle"))
    wait_available(api, namespace, "idle")
    hpas = client.AutoscalingV2Api(api)
    # The HPA reports on its metric a sync or two after creation; until then status legitimately
    # changes. (No metrics adapter runs in this test: ScalingActive ends False.)
    wait_until(
        lambda: any(
            c.type == "ScalingActive"
            for c in hpas.read_namespaced_horizontal_pod_autoscaler(
                "idle", namespace
            ).status.conditions
            or []
        ),
        what="the HPA's verdict on its metric",
    )
    time.sleep(2)  # let the last child events settle
    since = utcnow()
    unchanged_before = operator.metric("llmfleet_reconcile_total", result="unchanged")
    time.sleep(operator.resync_seconds * 2 + 2)
    resyncs = operator.metric("llmfleet_reconcile_total", result="unchanged") - unchanged_before
    assert resyncs >= 2, "the periodic resync did run"
    writes = operator.writes_since(since, namespace)
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]


def test_hand_edit_is_reverted_but_replicas_set_by_autoscaling_are_not_fought(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("edit", autoscaling={"maxReplicas": 4}))
    wait_available(api, namespace, "edit")
    apps = client.AppsV1Api(api)
    original = apps.read_namespaced_deployment("edit-tp1", namespace).spec.template.spec
    cluster.kubectl("set", "image", "-n", namespace, "deployment/edit-tp1", "vllm=evil/image:1")
    cluster.kubectl("scale", "-n", namespace, "deployment/edit-tp1", "--replicas=3")

    def reverted() -> bool:
        dep = apps.read_namespaced_deployment("edit-tp1", namespace)
        return bool(dep.spec.template.spec.containers[0].image == original.containers[0].image)

    wait_until(reverted, timeout=30, what="image reverted")
    time.sleep(operator.resync_seconds + 1)
    assert apps.read_namespaced_deployment("edit-tp1", namespace).spec.replicas == 3


def test_spec_change_rolls_the_same_deployment(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("roll"))
    wait_available(api, namespace, "roll")
    apps = client.AppsV1Api(api)
    before = apps.read_namespaced_deployment("roll-tp1", namespace)
    apply(cluster, namespace, llmd("roll", engine={"maxModelLen": 4096}))

    def rolled() -> bool:
        dep = apps.read_namespaced_deployment("roll-tp1", namespace)
        args = dep.spec.template.spec.containers[0].args
        return "4096" in args and dep.metadata.generation > before.metadata.generation

    wait_until(rolled, timeout=30, what="new args rolled out")
    obj = wait_available(api, namespace, "roll")
    assert [d.metadata.name for d in deployments(api, namespace)] == ["roll-tp1"]
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]


def test_layout_change_brings_the_new_layout_up_before_the_old_goes(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("flip"))
    wait_available(api, namespace, "flip")
    # The API server's own order of events: a watch sees every change to the Deployments.
    history: list[tuple[str, str, int]] = []
    w = watch.Watch()
    apps = client.AppsV1Api(api)

    def record() -> None:
        for ev in w.stream(apps.list_namespaced_deployment, namespace, timeout_seconds=120):
            d = ev["object"]
            history.append((ev["type"], d.metadata.name, d.status.ready_replicas or 0))

    t = threading.Thread(target=record, daemon=True)
    t.start()
    time.sleep(1)
    apply(cluster, namespace, llmd("flip", strategy="SinglePod"))
    obj = wait_available(api, namespace, "flip")
    wait_until(
        lambda: ("DELETED", "flip-tp1") in [(e, n) for e, n, _ in history],
        what="old layout deleted",
    )
    w.stop()

    deleted_at = next(i for i, (e, n, _) in enumerate(history) if (e, n) == ("DELETED", "flip-tp1"))
    new_ready = [i for i, (e, n, ready) in enumerate(history) if n == "flip-tp2" and ready >= 1]
    assert new_ready, history
    assert new_ready[0] < deleted_at, f"old layout went before the new one was ready: {history}"
    assert obj["status"]["plan"]["strategy"] == "SinglePod"
    assert obj["status"]["plan"]["tensorParallelSize"] == 2
    assert [d.metadata.name for d in deployments(api, namespace)] == ["flip-tp2"]


def test_delete_collects_every_child(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    apply(cluster, namespace, llmd("gone", autoscaling={"maxReplicas": 4}))
    wait_available(api, namespace, "gone")
    cluster.kubectl("delete", "llmd", "gone", "-n", namespace, "--wait=true", "--timeout=60s")
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def empty() -> bool:
        sel = "llmfleet.dev/deployment=gone"
        return not (
            apps.list_namespaced_deployment(namespace, label_selector=sel).items
            or core.list_namespaced_service(namespace, label_selector=sel).items
            or core.list_namespaced_pod(namespace, label_selector=sel).items
        )

    wait_until(empty, timeout=60, what="children garbage-collected")


# Each bad manifest is refused by the API server (schema/CEL) or, when only the planner can tell,
# accepted and reported as Planned=False. Either way the message names the field.
MALFORMED: list[tuple[str, dict[str, Any], str, str]] = [
    ("count-as-string", {"gpus": {**H100, "count": "eight"}}, "api", "spec.gpus.count"),
    ("unknown-dtype", {"model": {"name": "x/y", "dtype": "int4"}}, "api", "spec.model.dtype"),
    ("unknown-strategy", {"strategy": "Sideways"}, "api", "spec.strategy"),
    ("zero-gpus", {"gpus": {**H100, "count": 0}}, "api", "spec.gpus.count"),
    ("count-not-filling-nodes", {"gpus": {**H100, "count": 12}}, "api", "spec.gpus.count"),
    (
        "min-above-max",
        {"autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
        "api",
        "spec.autoscaling.maxReplicas",
    ),
    (
        "reserved-extra-arg",
        {"engine": {"extraArgs": ["--port", "9000"]}},
        "api",
        "spec.engine.extraArgs",
    ),
    (
        "product-not-a-label-value",
        {"gpus": {**H100, "product": "NVIDIA H100"}},
        "api",
        "spec.gpus.product",
    ),
    ("model-name-with-a-space", {"model": {"name": "my model"}}, "api", "spec.model.name"),
    (
        "pod-label-the-service-selects-by",
        {"engine": {"podLabels": {"app.kubernetes.io/component": "x"}}},
        "api",
        "spec.engine.podLabels",
    ),
    (
        "pod-annotation-key-with-a-space",
        {"engine": {"podAnnotations": {"cost center": "ml"}}},
        "api",
        "spec.engine.podAnnotations",
    ),
    ("model-id-not-ascii", {"model": {"name": "org/modèle"}}, "api", "spec.model.name"),
    (
        "unknown-model-without-architecture",
        {"model": {"name": "acme/secret-model"}},
        "planner",
        "spec.model.architecture",
    ),
    (
        "tp-impossible",
        {
            "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
            "gpus": {**H100, "count": 8},
            "strategy": "SinglePod",
        },
        "planner",
        "spec.gpus",
    ),
    (
        "three-gpus-for-tp2-model",
        {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "gpus": {**H100, "count": 3}},
        "planner",
        "spec.gpus.count",
    ),
]


@pytest.mark.parametrize(
    ("case", "spec", "refused_by", "field"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_manifest_is_refused_naming_the_field(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    case: str,
    spec: dict[str, Any],
    refused_by: str,
    field: str,
) -> None:
    name = f"bad-{case}"[:50]
    manifest = llmd(name, **spec)
    if refused_by == "api":
        with pytest.raises(subprocess.CalledProcessError) as err:
            apply(cluster, namespace, manifest)
        assert field in err.value.stderr, err.value.stderr
        return
    apply(cluster, namespace, manifest)

    def planned_false() -> dict[str, Any] | None:
        c = condition(get_llmd(api, namespace, name), "Planned")
        return c if c.get("status") == "False" else None

    cond = wait_until(planned_false, timeout=30, what="Planned=False")
    assert field in cond["message"], cond["message"]

    # The Warning Event follows the status write; wait for it rather than race it.
    def warned() -> bool:
        events = (
            client.CoreV1Api(api)
            .list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
            .items
        )
        return any(e.type == "Warning" and field in e.message for e in events)

    wait_until(warned, timeout=30, what="Warning Event naming the field")
    # The operator keeps serving: a good resource next to the bad one still converges.
    apply(cluster, namespace, llmd("good"))
    wait_available(api, namespace, "good")


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


def test_text_beyond_ascii_reaches_the_engine_as_written(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    served = "chat-😀-модель-模型"
    apply(
        cluster,
        namespace,
        llmd(
            "unicode", model={"name": "meta-llama/Llama-3.1-8B-Instruct", "servedModelName": served}
        ),
    )
    obj = wait_available(api, namespace, "unicode")
    assert condition(obj, "Degraded").get("status") == "False", condition(obj, "Degraded")
    (engine,) = deployments(api, namespace)
    container = engine.spec.template.spec.containers[0]
    argv = [*(container.command or []), *(container.args or [])]
    assert served in argv, argv


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
    time.sleep(12)  # two resyncs of the e2e operator: the warning is not repeated
    assert len(warnings()) == 1


def test_operator_killed_mid_reconcile_converges_without_duplicates(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    names = [f"crash-{i}" for i in range(8)]
    docs = [llmd(n, gpus={**H100, "count": 1}, autoscaling={"enabled": False}) for n in names]
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs)
    )
    time.sleep(0.5)
    operator.kill()
    operator.start()
    for n in names:
        wait_available(api, namespace, n, timeout=90)
    deps = deployments(api, namespace)
    assert sorted(d.metadata.name for d in deps) == sorted(f"{n}-tp1" for n in names)
    services = client.CoreV1Api(api).list_namespaced_service(namespace).items
    assert sorted(s.metadata.name for s in services) == sorted(names)


def test_kubectl_explain_describes_the_fields(operator: Operator, cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "llmd.spec.gpus")
    for field in ("count", "memoryGiB", "perNode", "product"):
        assert field in out
    assert "tensor" in out.lower()
    # A field new in 0.2.0: the chart installed (or upgraded) the current CRD.
    assert "rolls" in cluster.kubectl("explain", "llmd.spec.engine.podLabels")
