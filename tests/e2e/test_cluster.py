"""The local control plane behaves like a real cluster with GPU nodes."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from localcluster.nodes import Pool, node_manifests
from localcluster.supervisor import LWS, Cluster, bindir, pinned_versions

from .harness import wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab(
        "the lab's own components (kwok's GPU nodes, its LeaderWorkerSet controller, its "
        "pinned binaries): these tests check the lab"
    ),
]

GPU = "nvidia.com/gpu"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_LABEL = "leaderworkerset.sigs.k8s.io"  # prefix of the labels the LWS controller sets
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def gpu_deployment(name: str, gpus: int, product: str) -> client.V1Deployment:
    labels = {"app": name}
    container = client.V1Container(
        name="main",
        image="registry.invalid/gpu-job:1",
        resources=client.V1ResourceRequirements(limits={GPU: str(gpus)}),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[container],
                    node_selector={"nvidia.com/gpu.product": product},
                    tolerations=[client.V1Toleration(operator="Exists")],
                ),
            ),
        ),
    )


def test_gpu_nodes_advertise_gpus_and_gpu_feature_discovery_labels(api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api).list_node(label_selector="llmfleet.dev/pool=h100").items
    assert len(nodes) == 2
    for n in nodes:
        assert n.status.allocatable[GPU] == "8"
        assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert n.metadata.labels["nvidia.com/gpu.memory"] == "81559"
        assert n.metadata.labels["nvidia.com/gpu.count"] == "8"
    cpu_only = client.CoreV1Api(api).list_node(label_selector="llmfleet.dev/pool=cpu").items
    assert len(cpu_only) == 1
    assert GPU not in (cpu_only[0].status.allocatable or {})


@pytest.fixture
def a100_pool(cluster: Cluster) -> Iterator[str]:
    """A pool of the test's own (two nodes of 8 A100-40GB), added through a node-pool profile, so
    nothing else on the cluster competes for its GPUs."""
    product = f"NVIDIA-A100-SXM4-40GB-{uuid.uuid4().hex[:6]}"
    pool = Pool(name=f"a100-{product[-6:]}", count=2, gpus=8, product=product, gpu_memory_mib=40960)
    cluster.apply_nodes([pool])
    cluster.wait_nodes_ready()
    yield product
    for node in node_manifests(pool):
        cluster.kubectl("delete", "node", node["metadata"]["name"], "--wait=false")


def test_third_eight_gpu_deployment_stays_pending_for_lack_of_gpus(
    api: client.ApiClient, namespace: str, a100_pool: str
) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    for i in range(3):
        apps.create_namespaced_deployment(namespace, gpu_deployment(f"gpu8-{i}", 8, a100_pool))

    def settled() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace).items
        running = [p for p in pods if p.status.phase == "Running"]
        pending = [
            p
            for p in pods
            if p.status.phase == "Pending"
            and any(
                c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or []
            )
        ]
        return pods if len(running) == 2 and len(pending) == 1 else None

    pods = wait_until(settled, timeout=60)
    running_nodes = {p.spec.node_name for p in pods if p.status.phase == "Running"}
    assert len(running_nodes) == 2, "each 8-GPU pod takes a whole node"
    pending = next(p for p in pods if p.status.phase == "Pending")
    cond = next(c for c in pending.status.conditions if c.type == "PodScheduled")
    assert cond.reason == "Unschedulable"
    assert f"Insufficient {GPU}" in cond.message


def test_every_pod_ip_is_loopback(api: client.ApiClient, namespace: str, a100_pool: str) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    dep = gpu_deployment("ipcheck", 1, a100_pool)
    dep.spec.replicas = 4
    apps.create_namespaced_deployment(namespace, dep)
    wait_until(
        lambda: len([p for p in core.list_namespaced_pod(namespace).items if p.status.pod_ip]) == 4
    )
    # Every pod the cluster has handed an IP, in every namespace, not only ours.
    for pod in core.list_pod_for_all_namespaces().items:
        for ip in [pod.status.pod_ip, *(i.ip for i in pod.status.pod_i_ps or [])]:
            if ip:
                assert ipaddress.ip_address(ip) in LOOPBACK, (pod.metadata.name, ip)
        if pod.status.host_ip:
            assert ipaddress.ip_address(pod.status.host_ip) in LOOPBACK


def test_deleting_an_owner_garbage_collects_its_dependents(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    for i in range(3):
        core.create_namespaced_secret(
            namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=f"dependent-{i}", owner_references=[ref])
            ),
        )
    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="unowned"))
    )
    core.delete_namespaced_config_map("owner", namespace)

    def collected() -> bool:
        names = {s.metadata.name for s in core.list_namespaced_secret(namespace).items}
        return not any(n.startswith("dependent-") for n in names)

    wait_until(collected, timeout=60)
    assert core.read_namespaced_secret("unowned", namespace)


def test_kubectl_and_helm_report_the_pinned_versions(cluster: Cluster) -> None:
    pins = pinned_versions()
    out = json.loads(cluster.kubectl("version", "-o", "json"))
    assert out["clientVersion"]["gitVersion"] == pins["K8S_VERSION"]
    assert out["serverVersion"]["gitVersion"] == pins["K8S_VERSION"]
    assert out["serverVersion"]["minor"] == pins["K8S_VERSION"].split(".")[1]
    helm = subprocess.run(
        [str(bindir("helm") / "helm"), "version", "--template", "{{.Version}}"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert helm.stdout.strip() == pins["HELM_VERSION"]


# --- LeaderWorkerSet (sigs.k8s.io/lws, run by the supervisor) -----------------------------------


@pytest.fixture
def lws_cluster(cluster: Cluster) -> Cluster:
    """The session's cluster, which runs LeaderWorkerSet unless it was started without it."""
    if not cluster.lws:
        pytest.skip("the cluster runs without LeaderWorkerSet (LLMFLEET_LWS=0)")
    return cluster


def test_leaderworkerset_controller_is_the_pinned_version(lws_cluster: Cluster) -> None:
    crd = json.loads(lws_cluster.kubectl("get", "crd", f"{LWS_PLURAL}.{LWS_GROUP}", "-o", "json"))
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == [LWS_VERSION]
    log = (lws_cluster.state_dir / f"{LWS}.log").read_text()
    assert f'"gitVersion": "{pinned_versions()["LWS_VERSION"]}"' in log


@pytest.fixture
def h100_quad(lws_cluster: Cluster, api: client.ApiClient, namespace: str) -> Iterator[str]:
    """Four 8 x H100 nodes of the test's own (a GPU product label no other test uses): two groups
    of a leader and a worker, each pod taking a whole node. Afterwards the test's namespace goes
    first, then the nodes once kwok has removed their pods (a pod left on a deleted node waits
    for the pod garbage collector, which held the namespace in Terminating for 40 s)."""
    product = f"NVIDIA-H100-80GB-HBM3-{uuid.uuid4().hex[:6]}"
    pool = Pool(
        name=f"lws-{product[-6:]}",
        count=4,
        gpus=8,
        product=product,
        gpu_memory_mib=81559,
        cpu="96",
        memory="1536Gi",
    )
    names = [n["metadata"]["name"] for n in node_manifests(pool)]
    lws_cluster.apply_nodes([pool])
    lws_cluster.wait_nodes_ready()
    yield product
    core = client.CoreV1Api(api)
    core.delete_namespace(namespace, propagation_policy="Background")
    wait_until(
        lambda: (
            not [p for p in core.list_namespaced_pod(namespace).items if p.spec.node_name in names]
        ),
        timeout=60,
        what="the pool's pods gone",
    )
    for name in names:
        lws_cluster.kubectl("delete", "node", name, "--wait=false")


def leader_worker_set(name: str, product: str, size: int = 2) -> dict[str, Any]:
    """A LeaderWorkerSet of one group of `size` pods, each asking for a whole 8-GPU node."""
    pod = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": "registry.invalid/vllm:1",
                    "resources": {"limits": {GPU: "8"}},
                }
            ],
            "nodeSelector": {"nvidia.com/gpu.product": product},
            "tolerations": [{"operator": "Exists"}],
        },
    }
    return {
        "apiVersion": f"{LWS_GROUP}/{LWS_VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}},
    }


def lws_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LWS_LABEL}/name={name}").items
    return sorted(pods, key=lambda p: p.metadata.name)


def running(pods: list[client.V1Pod], n: int) -> list[client.V1Pod] | None:
    live = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return pods if len(pods) == n and len(live) == n else None


def env_of(pod: client.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def test_leaderworkerset_group_runs_leader_and_worker_on_two_gpu_nodes(
    api: client.ApiClient, namespace: str, h100_quad: str
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, leader_worker_set("llama", h100_quad)
    )
    pods = wait_until(
        lambda: running(lws_pods(core, namespace, "llama"), 2),
        timeout=60,
        what="leader and worker Running",
    )
    leader, worker = pods  # llama-0 (the leader StatefulSet's), llama-0-1 (the group's workers)
    assert (leader.metadata.name, worker.metadata.name) == ("llama-0", "llama-0-1")
    assert leader.metadata.labels[f"{LWS_LABEL}/worker-index"] == "0"
    assert worker.metadata.labels[f"{LWS_LABEL}/worker-index"] == "1"
    for p in pods:
        assert p.metadata.labels[f"{LWS_LABEL}/group-index"] == "0"
    assert (
        worker.metadata.labels[f"{LWS_LABEL}/group-key"]
        == leader.metadata.labels[f"{LWS_LABEL}/group-key"]
    )
    # Eight GPUs each: the scheduler had to put them on two nodes, both of this pool.
    nodes = {p.spec.node_name for p in pods}
    assert len(nodes) == 2
    for n in nodes:
        node = core.read_node(n)
        assert node.metadata.labels["nvidia.com/gpu.product"] == h100_quad

    # What the pod webhook injected: how a worker finds its leader (vLLM's --master-addr, Ray's
    # head address) and its rank.
    address = f"llama-0.llama.{namespace}"
    assert env_of(worker) == {
        "LWS_LEADER_ADDRESS": address,
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "1",
    }
    assert env_of(leader) == {
        "LWS_LEADER_ADDRESS": address,
        "LWS_GROUP_SIZE": "2",
        "LWS_WORKER_INDEX": "0",
    }
    # The address is the leader's DNS name: <hostname>.<subdomain>.<namespace> through the
    # headless Service the controller made.
    assert (leader.spec.hostname, leader.spec.subdomain) == ("llama-0", "llama")
    svc = core.read_namespaced_service("llama", namespace)
    assert svc.spec.cluster_ip == "None"
    assert svc.spec.selector == {f"{LWS_LABEL}/name": "llama"}
    sts = {
        s.metadata.name: s.spec.replicas for s in apps.list_namespaced_stateful_set(namespace).items
    }
    assert sts == {"llama": 1, "llama-0": 1}

    def available() -> dict[str, Any] | None:
        got: dict[str, Any] = custom.get_namespaced_custom_object(
            LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, "llama"
        )
        conds = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
        return got if conds.get("Available") == "True" else None

    status = wait_until(available, timeout=30, what="LeaderWorkerSet Available")["status"]
    assert (status["replicas"], status["readyReplicas"]) == (1, 1)


def test_leaderworkerset_scales_through_its_scale_subresource(
    api: client.ApiClient, cluster: Cluster, namespace: str, h100_quad: str
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, leader_worker_set("llama", h100_quad)
    )
    wait_until(lambda: running(lws_pods(core, namespace, "llama"), 2), timeout=60)

    cluster.kubectl("scale", "-n", namespace, "leaderworkerset/llama", "--replicas=2")
    pods = wait_until(
        lambda: running(lws_pods(core, namespace, "llama"), 4),
        timeout=60,
        what="two groups Running",
    )
    assert [p.metadata.name for p in pods] == ["llama-0", "llama-0-1", "llama-1", "llama-1-1"]
    assert len({p.spec.node_name for p in pods}) == 4
    second = [p for p in pods if p.metadata.labels[f"{LWS_LABEL}/group-index"] == "1"]
    assert {env_of(p)["LWS_LEADER_ADDRESS"] for p in second} == {f"llama-1.llama.{namespace}"}

    # What an HPA reads: the scale subresource's replicas and a selector of the leaders only
    # (one pod per group, the one that serves).
    path = f"/apis/{LWS_GROUP}/{LWS_VERSION}/namespaces/{namespace}/{LWS_PLURAL}/llama/scale"

    def scale() -> dict[str, Any] | None:
        got: dict[str, Any] = json.loads(cluster.kubectl("get", "--raw", path))
        return got if got["status"].get("replicas") == 2 else None

    got = wait_until(scale, timeout=30, what="scale status.replicas 2")
    assert got["spec"]["replicas"] == 2
    selected = core.list_namespaced_pod(namespace, label_selector=got["status"]["selector"]).items
    assert sorted(p.metadata.name for p in selected) == ["llama-0", "llama-1"]

    # And the HPA controller drives it: above maxReplicas it scales the LeaderWorkerSet down to
    # one group, through the same subresource.
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        namespace,
        client.V2HorizontalPodAutoscaler(
            metadata=client.V1ObjectMeta(name="llama"),
            spec=client.V2HorizontalPodAutoscalerSpec(
                scale_target_ref=client.V2CrossVersionObjectReference(
                    api_version=f"{LWS_GROUP}/{LWS_VERSION}", kind="LeaderWorkerSet", name="llama"
                ),
                min_replicas=1,
                max_replicas=1,
                metrics=[
                    client.V2MetricSpec(
                        type="Resource",
                        resource=client.V2ResourceMetricSource(
                            name="cpu",
                            target=client.V2MetricTarget(
                                type="Utilization", average_utilization=80
                            ),
                        ),
                    )
                ],
            ),
        ),
    )
    pods = wait_until(
        lambda: running(lws_pods(core, namespace, "llama"), 2),
        timeout=60,
        what="the HPA scaled back to one group",
    )
    assert [p.metadata.name for p in pods] == ["llama-0", "llama-0-1"]
    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler("llama", namespace)
    able = next(c for c in hpa.status.conditions if c.type == "AbleToScale")
    assert able.status == "True"


def test_cluster_without_leaderworkerset_has_no_such_api(
    api: client.ApiClient, lws_cluster: Cluster, namespace: str
) -> None:
    """What the operator meets on a cluster without LWS (Cluster.without(addons.lws); a cluster
    started with LLMFLEET_LWS=0 removes what an earlier start installed the same way,
    AddOn.remove): no API group, and no webhook left behind that would refuse pods carrying its
    labels."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    with lws_cluster.without(lws_cluster.addons.lws):
        assert not lws_cluster.alive(LWS)
        groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
        assert LWS_GROUP not in groups
        with pytest.raises(client.ApiException) as refused:
            custom.create_namespaced_custom_object(
                LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, leader_worker_set("x", "none")
            )
        assert refused.value.status == 404
        core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="x-0", labels={f"{LWS_LABEL}/name": "x"}),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="main", image="registry.invalid/x:1")]
                ),
            ),
        )
        # (Gone before the controller comes back: it would retry this pod, no group's, in vain.)
        core.delete_namespaced_pod("x-0", namespace, grace_period_seconds=0)
    # Back: the controller runs and its webhooks answer again (AddOn.start checked both).
    assert lws_cluster.alive(LWS)
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert LWS_GROUP in groups
