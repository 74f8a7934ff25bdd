"""KEDA on the local cluster (dev/localcluster/keda.py, run by the supervisor): a ScaledObject
with a Prometheus trigger scales a Deployment to zero and back, through the metrics stack's
Prometheus, and the HPA it creates reads its metric from external.metrics.k8s.io."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from kubernetes import client
from localcluster import keda
from localcluster.metricsstack import MetricsStack
from localcluster.supervisor import KEDA_OPERATOR, Cluster, pinned_versions

from .harness import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.lab("the lab's KEDA and metrics stack")]

GROUP, VERSION, PLURAL = keda.API_GROUP, "v1alpha1", "scaledobjects"
# Short, so the test stays cheap: KEDA polls Prometheus every 2 s and scales to zero 5 s after
# the query last was above zero.
POLLING_S, COOLDOWN_S = 2, 5


@pytest.fixture
def keda_cluster(cluster: Cluster) -> Cluster:
    if not cluster.keda:
        pytest.skip("the cluster runs without KEDA (LLMFLEET_KEDA=0)")
    return cluster


def test_keda_is_the_pinned_version(keda_cluster: Cluster) -> None:
    assert all(keda_cluster.addons.keda.state().values()), keda_cluster.addons.keda.state()
    log = (keda_cluster.state_dir / f"{KEDA_OPERATOR}.log").read_text()
    assert f"KEDA Version: {pinned_versions()['KEDA_VERSION'].removeprefix('v')}" in log


def idle_deployment(name: str) -> client.V1Deployment:
    """One replica on the CPU-only kwok node (kwok reports it Running; nothing runs)."""
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="main", image="registry.invalid/idle:1")],
                    node_selector={"llmfleet.dev/pool": "cpu"},
                    tolerations=[client.V1Toleration(operator="Exists")],
                ),
            ),
        ),
    )


def test_scaledobject_scales_a_deployment_to_zero_and_back_through_prometheus(
    api: client.ApiClient, keda_cluster: Cluster, metrics_stack: MetricsStack, namespace: str
) -> None:
    apps, autoscaling = client.AppsV1Api(api), client.AutoscalingV2Api(api)
    custom = client.CustomObjectsApi(api)
    apps.create_namespaced_deployment(namespace, idle_deployment("app"))

    def running() -> int:
        # Pods, not the Deployment's replicas: what a user of the workload would see.
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector="app=app")
        return len([p for p in pods.items if p.status.phase == "Running"])

    wait_until(lambda: running() == 1, timeout=30, what="the Deployment's pod Running")
    # The demand: a series in Prometheus (a recording rule) that the test sets to 1 or 0, as an
    # engine's queue would be; KEDA polls the query, nothing tells it of a change.
    series = f'llmfleet_keda_test_demand{{namespace="{namespace}"}}'

    def demand(value: int) -> None:
        rule = {
            "record": "llmfleet_keda_test_demand",
            "expr": f"vector({value})",
            "labels": {"namespace": namespace},
        }
        groups = {"groups": [{"name": namespace, "rules": [rule]}]}
        metrics_stack.load_rules(namespace, yaml.safe_dump(groups))
        wait_until(lambda: metrics_stack.value(series) == value, timeout=10, interval=0.2)

    demand(1)
    so = keda.scaled_object(
        "app",
        namespace,
        "app",
        metrics_stack.prometheus_url,
        series,
        polling_interval=POLLING_S,
        cooldown_period=COOLDOWN_S,
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, so)
    try:
        # KEDA made the HPA, and the HPA controller reads the trigger's value through the
        # adapter (external.metrics.k8s.io) and the operator.
        hpa = wait_until(
            lambda: _scaling_active(autoscaling, namespace, "keda-hpa-app"),
            timeout=30,
            what="HPA keda-hpa-app ScalingActive",
        )
        ext = hpa.spec.metrics[0].external
        selector = ",".join(f"{k}={v}" for k, v in ext.metric.selector.match_labels.items())
        path = (
            f"/apis/{keda.EXTERNAL_METRICS_GROUP}/v1beta1/namespaces/{namespace}/"
            f"{ext.metric.name}?labelSelector={selector}"
        )
        values = json.loads(keda_cluster.kubectl("get", "--raw", path))["items"]
        assert [v["value"] for v in values] == ["1"]

        demand(0)
        idle = time.monotonic()
        wait_until(lambda: running() == 0, timeout=COOLDOWN_S + 20, what="scaled to zero")
        print(f"scaled to zero {time.monotonic() - idle:.1f}s after the demand went to 0")
        assert apps.read_namespaced_deployment("app", namespace).spec.replicas == 0

        demand(1)
        woke = time.monotonic()
        wait_until(lambda: running() == 1, timeout=POLLING_S + 20, what="back to one pod")
        print(f"back to one pod {time.monotonic() - woke:.1f}s after the demand went to 1")
    finally:
        metrics_stack.remove_rules(namespace)


def _scaling_active(
    autoscaling: client.AutoscalingV2Api, namespace: str, name: str
) -> client.V2HorizontalPodAutoscaler | None:
    try:
        hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    conditions = hpa.status.conditions or []
    active = any(c.type == "ScalingActive" and c.status == "True" for c in conditions)
    return hpa if active else None
