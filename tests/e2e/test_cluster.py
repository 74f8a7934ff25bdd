"""The local control plane behaves like a real cluster with GPU nodes."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster.nodes import Pool, node_manifests
from localcluster.supervisor import Cluster, bindir, pinned_versions

from .harness import wait_until

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
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
