"""LLMDeployment end to end: the real operator process against the real local control plane, its
engines on kwok's GPU nodes. (What needs the API server alone: tests/api/test_llmdeployment.py.)"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from localcluster.nodes import Pool
from localcluster.supervisor import Cluster
from manifests import H100, apply, deployments, llmd

from llmfleet.models import DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE

from .harness import E2E_GPU_PRODUCT, Operator, condition, get_llmd, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("kwok's GPU nodes (where the engines become Available) and the audit log"),
]


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
        assert (ref.kind, ref.name, ref.uid, ref.controller) == (
            "LLMDeployment",
            "chat",
            uid,
            True,
        )
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
    assert row.split()[:7] == [
        "chat",
        "MultiPod",
        "2",
        "2",
        "2",
        "True",
        "EnginesReady",
    ]


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


# Bad manifests the API server cannot tell from good ones: accepted, and reported as
# Planned=False with the message naming the field. (Those the API server refuses:
# tests/api/test_llmdeployment.py.)
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    (
        # Not in the catalog, so the operator asks the Hub (the session's stand-in) for its
        # config.json: the Hub has no such model.
        "unknown-model-without-architecture",
        {"model": {"name": "acme/secret-model"}},
        "spec.model.name",
    ),
    (
        # A path in the container: the operator cannot read its config.json.
        "path-model-without-architecture",
        {"model": {"name": "/models/secret-model"}},
        "spec.model.architecture",
    ),
    (
        "tp-impossible",
        {
            "model": {"name": "meta-llama/Llama-3.1-405B-Instruct"},
            "gpus": {**H100, "count": 8},
            "strategy": "SinglePod",
        },
        "spec.gpus",
    ),
    (
        "three-gpus-for-tp2-model",
        {
            "model": {"name": "meta-llama/Llama-3.1-70B-Instruct"},
            "gpus": {**H100, "count": 3},
        },
        "spec.gpus.count",
    ),
]


@pytest.mark.parametrize(("case", "spec", "field"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_manifest_is_refused_naming_the_field(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    case: str,
    spec: dict[str, Any],
    field: str,
) -> None:
    name = f"bad-{case}"[:50]
    apply(cluster, namespace, llmd(name, **spec))

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


def test_text_beyond_ascii_reaches_the_engine_as_written(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    served = "chat-😀-модель-模型"
    apply(
        cluster,
        namespace,
        llmd(
            "unicode",
            model={
                "name": "meta-llama/Llama-3.1-8B-Instruct",
                "servedModelName": served,
            },
        ),
    )
    obj = wait_available(api, namespace, "unicode")
    assert condition(obj, "Degraded").get("status") == "False", condition(obj, "Degraded")
    (engine,) = deployments(api, namespace)
    container = engine.spec.template.spec.containers[0]
    argv = [*(container.command or []), *(container.args or [])]
    assert served in argv, argv


def test_operator_killed_mid_reconcile_converges_without_duplicates(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    names = [f"crash-{i}" for i in range(8)]
    docs = [llmd(n, gpus={**H100, "count": 1}, autoscaling={"enabled": False}) for n in names]
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input="\n---\n".join(yaml.safe_dump(d) for d in docs),
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


# Pools of exactly the GPUs an LLMDeployment of one GPU a replica needs (one replica; two for
# "pair"), each for one test: nothing else lands there, and no GPU is free for a surge pod.
FULL_POOLS = {
    "crash": Pool(name="full-crash", count=1, gpus=1, product="LLMFleet-Full-Crash-H100"),
    "healthy": Pool(name="full-healthy", count=1, gpus=1, product="LLMFleet-Full-Healthy-H100"),
    "pair": Pool(name="full-pair", count=2, gpus=1, product="LLMFleet-Full-Pair-H100"),
}
# kwok starts a pod in about a second; after the fix: one reconcile (~1 s) to let the
# Deployment controller replace the failed pod, the scheduler's retry of the Pending pod once
# the GPU is free (its back-off is at most 10 s), then another reconcile for status. Without
# the fix the rollout never ends.
FIXED_ROLLOUT_WITHIN = 30.0


@pytest.fixture(scope="module")
def full_pools(cluster: Cluster) -> dict[str, str]:
    cluster.apply_nodes(list(FULL_POOLS.values()))
    cluster.wait_nodes_ready()
    return {case: pool.product for case, pool in FULL_POOLS.items()}


def one_gpu_on(product: str, replicas: int = 1, **spec: Any) -> dict[str, Any]:
    """An LLMDeployment of `replicas` engines of one GPU each on the pool of `product`."""
    gpus = {"count": replicas, "memoryGiB": 80, "perNode": 1, "product": product}
    return llmd(product.lower(), gpus=gpus, autoscaling={"enabled": False}, **spec)


def ready_pod(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def events_of(api: client.ApiClient, namespace: str, name: str, reason: str) -> list[str]:
    """The messages of the LLMDeployment's Events of `reason`."""
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [e.message for e in events.items if e.reason == reason]


def engine_pods(api: client.ApiClient, namespace: str, name: str) -> list[client.V1Pod]:
    selector = f"llmfleet.dev/deployment={name},app.kubernetes.io/component=engine"
    pods: list[client.V1Pod] = (
        client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    )
    return pods


def rolling(api: client.ApiClient, namespace: str, name: str) -> tuple[int, int]:
    """The engine Deployment's (maxSurge, maxUnavailable)."""
    dep = client.AppsV1Api(api).read_namespaced_deployment(f"{name}-tp1", namespace)
    r = dep.spec.strategy.rolling_update
    return int(r.max_surge), int(r.max_unavailable)


def test_fixing_a_crash_looping_engine_on_a_full_gpu_pool_rolls_out(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    full_pools: dict[str, str],
) -> None:
    """The old pod never started (its image has no `vllm`) and holds the pool's only GPU: the
    fix's pod would wait for it forever under maxSurge 1 / maxUnavailable 0."""
    body = one_gpu_on(full_pools["crash"], engine={"image": DEFAULT_FETCHER_IMAGE})
    name = body["metadata"]["name"]
    apply(cluster, namespace, body)

    def refused() -> list[client.V1Pod]:
        return [
            p
            for p in engine_pods(api, namespace, name)
            if p.spec.node_name
            and p.status.container_statuses
            and p.status.container_statuses[0].state.waiting
            and p.status.container_statuses[0].state.waiting.reason
            in ("RunContainerError", "CrashLoopBackOff")
        ]

    (broken,) = wait_until(refused, timeout=30, what="the engine pod refused by the kubelet")
    body["spec"]["engine"] = {"image": DEFAULT_ENGINE_IMAGE}
    fixed = time.monotonic()
    apply(cluster, namespace, body)

    def rolled_out() -> list[client.V1Pod] | None:
        pods = engine_pods(api, namespace, name)
        done = (
            len(pods) == 1
            and pods[0].metadata.uid != broken.metadata.uid
            and pods[0].status.phase == "Running"
            and pods[0].spec.containers[0].image == DEFAULT_ENGINE_IMAGE
        )
        return pods if done else None

    wait_until(rolled_out, timeout=FIXED_ROLLOUT_WITHIN, what="the fixed engine pod running")
    obj = wait_available(api, namespace, name, timeout=FIXED_ROLLOUT_WITHIN)
    took = time.monotonic() - fixed
    assert took < FIXED_ROLLOUT_WITHIN, took
    assert condition(obj, "Available")["status"] == "True"
    # Status said what happened, once, and the strategy is back to zero-downtime surging.
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    said = [e for e in events.items if e.reason == "ReplacingUnservingPods"]
    assert len(said) == 1, [e.message for e in said]
    assert broken.metadata.name in said[0].message
    assert "no GPU is free" in said[0].message
    assert rolling(api, namespace, name) == (1, 0)


def test_a_healthy_fleet_on_a_full_gpu_pool_keeps_serving_while_its_rollout_waits(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    full_pools: dict[str, str],
) -> None:
    """One replica: a Ready pod is never removed before its replacement is Ready. With no GPU
    free the rollout waits, status says why, and the fleet does not read Degraded: it serves."""
    body = one_gpu_on(full_pools["healthy"])
    name = body["metadata"]["name"]
    apply(cluster, namespace, body)
    wait_available(api, namespace, name)
    (serving,) = engine_pods(api, namespace, name)
    body["spec"]["engine"] = {"maxModelLen": 4096}
    apply(cluster, namespace, body)

    def waiting() -> dict[str, Any] | None:
        obj = get_llmd(api, namespace, name)
        said = condition(obj, "Progressing")
        return obj if said.get("reason") == "WaitingForGPUsToRoll" else None

    wait_until(waiting, timeout=30, what="Progressing WaitingForGPUsToRoll for the new pod")
    # Two resyncs: time for the operator to change the strategy or status, were it going to.
    time.sleep(2 * operator.resync_seconds)
    obj = get_llmd(api, namespace, name)
    assert condition(obj, "Available")["status"] == "True", condition(obj, "Available")
    assert condition(obj, "Degraded")["status"] != "True", condition(obj, "Degraded")
    assert condition(obj, "ScalingLimited")["reason"] == "InsufficientGPUs"
    progressing = condition(obj, "Progressing")
    assert progressing["reason"] == "WaitingForGPUsToRoll", progressing
    (pending,) = [p for p in engine_pods(api, namespace, name) if not p.spec.node_name]
    assert pending.metadata.name in progressing["message"], progressing
    assert "keep serving" in progressing["message"], progressing
    assert rolling(api, namespace, name) == (1, 0)
    pods = {p.metadata.uid: p for p in engine_pods(api, namespace, name)}
    kept = pods.get(serving.metadata.uid)
    assert kept is not None, "the serving pod was removed"
    assert not kept.metadata.deletion_timestamp, "the serving pod is being removed"
    assert ready_pod(kept)
    said = events_of(api, namespace, name, "WaitingForGPUsToRoll")
    assert len(said) == 1, said
    assert pending.metadata.name in said[0], said
    assert not events_of(api, namespace, name, "InsufficientGPUs")


# kwok starts a pod in about a second; each of the two replacements takes the old pod's
# termination, the scheduler's retry of the Pending pod once its GPU is free (its back-off is at
# most 10 s) and the new pod's start. Without the fix the rollout never ends.
PAIR_ROLLOUT_WITHIN = 45.0


def test_a_healthy_fleet_of_two_on_a_full_gpu_pool_rolls_one_pod_at_a_time(
    operator: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    full_pools: dict[str, str],
) -> None:
    """Two replicas on exactly two GPUs: the rollout replaces one pod at a time in place, as the
    PodDisruptionBudget allows, to completion; at least one pod serves throughout, and the
    fleet never reads Degraded."""
    body = one_gpu_on(full_pools["pair"], replicas=2)
    name = body["metadata"]["name"]
    apply(cluster, namespace, body)
    wait_available(api, namespace, name)
    before = {p.metadata.uid for p in engine_pods(api, namespace, name)}
    assert len(before) == 2
    body["spec"]["engine"] = {"maxModelLen": 4096}
    apply(cluster, namespace, body)
    started = time.monotonic()
    fewest_ready, degraded, ways = 2, [], set()
    while True:
        pods = engine_pods(api, namespace, name)
        obj = get_llmd(api, namespace, name)
        fewest_ready = min(fewest_ready, sum(1 for p in pods if ready_pod(p)))
        if condition(obj, "Degraded").get("status") == "True":
            degraded.append(condition(obj, "Degraded"))
        ways.add(condition(obj, "Progressing").get("reason"))
        new = [p for p in pods if p.metadata.uid not in before]
        done = (
            len(pods) == 2
            and len(new) == 2
            and all(ready_pod(p) and "4096" in p.spec.containers[0].args for p in new)
        )
        if done:
            break
        assert time.monotonic() - started < PAIR_ROLLOUT_WITHIN, (
            ways,
            [p.metadata.name for p in pods],
        )
        time.sleep(0.2)
    assert fewest_ready >= 1
    assert degraded == []
    assert "RollingOneAtATime" in ways, ways
    said = events_of(api, namespace, name, "RollingOneAtATime")
    assert len(said) == 1, said
    obj = wait_available(api, namespace, name, timeout=30)
    assert condition(obj, "Degraded")["status"] != "True", condition(obj, "Degraded")
    # The roll over, the strategy is back to surging, and the budget the roll kept to is there.
    assert rolling(api, namespace, name) == (1, 0)
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(name, namespace)
    assert int(pdb.spec.max_unavailable) == 1
