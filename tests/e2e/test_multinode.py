"""A model larger than one node, end to end: the 405B bf16 example on fake 8xH100 nodes becomes
one LeaderWorkerSet group of a leader and a worker on two nodes (the real LeaderWorkerSet
controller and its pod webhook run in the local cluster), the HPA scales it through the
LeaderWorkerSet, only the leader serves; a change to a single-node layout keeps the group until
the new pod is up; and a cluster without the LeaderWorkerSet API gets Planned=False, then the
LLMDeployment once the API is installed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.nodes import Pool
from localcluster.supervisor import REPO, Cluster

from .harness import Operator, condition, get_llmd, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("kwok's GPU nodes and the lab's LeaderWorkerSet controller"),
]

PRODUCT = "NVIDIA-H100-80GB-HBM3-MULTINODE"
# Three nodes of its own: a group of two, and a spare node for the single-node layout that
# replaces it (the old layout serves until the new one is up, so both must fit at once).
POOL = Pool(name="multinode", count=3, gpus=8, product=PRODUCT, gpu_memory_mib=81559)
LWS_GROUP = "leaderworkerset.x-k8s.io"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module")
def nodes(cluster: Cluster) -> str:
    cluster.apply_nodes([POOL])
    cluster.wait_nodes_ready()
    return PRODUCT


def example(gpus: int = 16) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(
        (REPO / "examples" / "llama-3.1-405b-2x8xh100.yaml").read_text()
    )
    body["spec"]["gpus"] = {"count": gpus, "memoryGiB": 80, "perNode": 8, "product": PRODUCT}
    body["spec"]["model"].pop("tokenSecretRef")  # no Secret in the test's namespace
    return body


def lws_list(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.CustomObjectsApi(api).list_namespaced_custom_object(
        LWS_GROUP, "v1", namespace, "leaderworkersets"
    )["items"]
    return items


def running_pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    return [
        p
        for p in core.list_namespaced_pod(namespace).items
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
    ]


def test_a_model_larger_than_a_node_runs_as_one_group_over_two_nodes(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str, nodes: str
) -> None:
    core = client.CoreV1Api(api)
    body = example()
    name = body["metadata"]["name"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))

    def available() -> dict[str, Any] | None:
        obj = get_llmd(api, namespace, name)
        return obj if condition(obj, "Available").get("status") == "True" else None

    obj = wait_until(available, timeout=90, what=f"{name} Available")
    planned = condition(obj, "Planned")
    assert planned["status"] == "True", planned
    for words in ("TP=8", "PP=2", "2 nodes"):
        assert words in planned["message"], planned["message"]
    assert obj["status"]["plan"]["strategy"] == "MultiNode"
    assert obj["status"]["plan"]["pipelineParallelSize"] == 2

    (lws,) = lws_list(api, namespace)
    assert lws["metadata"]["name"] == f"{name}-tp8-pp2"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["status"]["readyReplicas"] == 1

    pods = wait_until(
        lambda: found if len(found := running_pods(core, namespace)) == 2 else None,
        timeout=60,
        what="the leader and the worker Running",
    )
    by_role = {p.metadata.labels[WORKER_INDEX]: p for p in pods}
    leader, worker = by_role["0"], by_role["1"]
    assert leader.spec.node_name != worker.spec.node_name  # one pod per node
    for pod in (leader, worker):
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        # LeaderWorkerSet's webhook told each pod where its leader is; vLLM's launcher uses it.
        assert env.get("LWS_LEADER_ADDRESS"), env
        assert "$(LWS_LEADER_ADDRESS)" in pod.spec.containers[0].args
    assert "--headless" in worker.spec.containers[0].args
    assert leader.metadata.labels["app.kubernetes.io/component"] == "engine"
    assert worker.metadata.labels["app.kubernetes.io/component"] == "engine-worker"

    # Only the leader serves: the engine Service selects the leader alone.
    # (What its endpoints would hold: this cluster's pod IPs are loopback, which the
    # EndpointSlice controller leaves out, so the selector is asked directly.)
    service = core.read_namespaced_service(name, namespace)
    text = ",".join(f"{k}={v}" for k, v in sorted(service.spec.selector.items()))
    served_by = core.list_namespaced_pod(namespace, label_selector=text).items
    assert [p.metadata.name for p in served_by] == [leader.metadata.name]

    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(name, namespace)
    target = hpa.spec.scale_target_ref
    assert (target.api_version, target.kind, target.name) == (
        f"{LWS_GROUP}/v1",
        "LeaderWorkerSet",
        lws["metadata"]["name"],
    )
    # The HPA reads the LeaderWorkerSet's scale subresource: its selector picks the leaders.
    scale = client.CustomObjectsApi(api).get_namespaced_custom_object_scale(
        LWS_GROUP, "v1", namespace, "leaderworkersets", lws["metadata"]["name"]
    )
    selector = scale["status"]["selector"]
    selected = core.list_namespaced_pod(namespace, label_selector=selector).items
    assert [p.metadata.name for p in selected] == [leader.metadata.name]

    # A change to one node: the fp8 model fits one node of 8; the group serves until it is up.
    since = utcnow()
    cluster.kubectl(
        "patch",
        "llmd",
        name,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"model": {"quantization": "fp8"}, "gpus": {"count": 8}}}',
    )

    def moved() -> list[client.V1Pod] | None:
        # The group first, then the pods: read the other way round, the pods could be older than
        # the group's deletion (kwok readies a pod within milliseconds, and the operator deletes
        # the group at once), and the new pod would look unready though it was Ready first.
        if lws_list(api, namespace):
            return None
        engines = core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=engine"
        ).items
        new = [p for p in engines if WORKER_INDEX not in p.metadata.labels]
        return new or None

    (new_pod,) = wait_until(moved, timeout=90, what="the single-node layout replacing the group")
    (deleted,) = [
        e
        for e in operator.writes_since(since, namespace)
        if e["verb"] == "delete" and e["objectRef"]["resource"] == "leaderworkersets"
    ]
    deleted_at = datetime.fromisoformat(deleted["requestReceivedTimestamp"].replace("Z", "+00:00"))
    ready = [c for c in new_pod.status.conditions or [] if c.type == "Ready"]
    assert [c.status for c in ready] == ["True"], "the group went before the new pod was Ready"
    # Kubernetes keeps whole seconds: the new pod was Ready within the second of the delete or
    # before it, never after.
    assert ready[0].last_transition_time <= deleted_at.replace(microsecond=0) + timedelta(seconds=1)
    obj = wait_until(available, timeout=60, what=f"{name} Available on one node")
    assert obj["status"]["plan"]["strategy"] == "SinglePod"


def test_without_the_leaderworkerset_api_it_waits_planned_false_then_is_created(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str, nodes: str
) -> None:
    body = example()
    name = body["metadata"]["name"]
    mark = operator.mark()
    log_start = operator.log_path.stat().st_size

    def planned() -> dict[str, Any]:
        return condition(get_llmd(api, namespace, name), "Planned")

    with cluster.without(cluster.addons.lws):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
        cond = wait_until(
            lambda: (c := planned()).get("reason") == "LeaderWorkerSetMissing" and c,
            timeout=60,
            what="Planned=False LeaderWorkerSetMissing",
        )
        assert cond["status"] == "False"
        for words in ("TP=8", "PP=2", "install LeaderWorkerSet", "spec.gpus"):
            assert words in cond["message"], cond["message"]
        assert not client.AppsV1Api(api).list_namespaced_deployment(namespace).items
        assert operator.exits_since(mark) == [], "the operator restarted"  # reported, not crashed
    # Installed again: the operator finds the API on its next look and creates the group.
    wait_until(lambda: lws_list(api, namespace), timeout=60, what="the LeaderWorkerSet created")
    # The reconcile that created it writes status after it (one apply, then one status write).
    wait_until(lambda: planned()["status"] == "True", timeout=30, what="Planned=True")
    with operator.log_path.open("rb") as log:
        log.seek(log_start)
        assert b"Traceback" not in log.read()
