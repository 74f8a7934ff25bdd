"""Standby engines against the API server, with the operator under the chart's RBAC: what it
creates for spec.autoscaling.standby (the standby Deployment, the fence's ConfigMap, the
token's Secret) and status.standby surviving the CRD's schema. The engines' sleep and wake are
tests/unit/test_standby_loop.py's and tests/e2e/test_standby.py's."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from localcluster.operator_process import Operator, get_llmd
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import apply, llmd

pytestmark = pytest.mark.cluster

AUTOSCALING = {"minReplicas": 1, "maxReplicas": 2}


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_llmd(api, namespace, name).get("status") or {})


def standby_deployment(api: client.ApiClient, namespace: str) -> client.V1Deployment | None:
    try:
        return client.AppsV1Api(api).read_namespaced_deployment("sb-standby", namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_standby_engines_run_fenced_with_a_token_only_the_operator_made(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, llmd("sb", autoscaling={**AUTOSCALING, "standby": {"replicas": 2}}))
    deployment = wait_until(lambda: standby_deployment(api, namespace), what="sb-standby")
    assert deployment.spec.replicas == 2
    assert deployment.spec.template.metadata.labels["llmfleet.dev/standby"] == "true"
    core = client.CoreV1Api(api)
    fence = core.read_namespaced_config_map("sb-standby", namespace)
    assert "class DevModeFence" in fence.data["llmfleet_devfence.py"]
    secret = core.read_namespaced_secret("sb-standby", namespace)
    assert len(base64.b64decode(secret.data["token"])) == 64  # an HMAC-SHA256, hex
    # No engine answers on this cluster: none asleep, none awake, and the field kept.
    wait_until(
        lambda: status(api, namespace, "sb").get("standby") == {"asleep": 0, "awake": 0},
        what="status.standby",
    )


def test_standby_removed_takes_its_deployment_and_status_with_it(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, llmd("sb", autoscaling={**AUTOSCALING, "standby": {"replicas": 1}}))
    wait_until(lambda: standby_deployment(api, namespace), what="sb-standby")
    apply(cluster, namespace, llmd("sb", autoscaling=AUTOSCALING))
    wait_until(lambda: standby_deployment(api, namespace) is None, what="sb-standby pruned")
    wait_until(lambda: "standby" not in status(api, namespace, "sb"), what="status.standby gone")
