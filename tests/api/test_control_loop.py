"""The operator's one control loop per kind (llmfleet.reconcile.machinery.loop), against the API
server with the operator running under the chart's RBAC: a spec change reaches the children through
kopf's event and the kind's queue, and the operator writes nothing onto its resources but their
status (no annotations, no finalizers: the chart grants no `patch` on them)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from localcluster.operator_process import Operator, get_llmd
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until
from manifests import apply, llmd

pytestmark = pytest.mark.cluster

# Annotations a client writes itself (kubectl apply's record of what it applied).
CLIENTS_OWN = ("kubectl.kubernetes.io/",)


def observed(api: client.ApiClient, namespace: str, name: str) -> int | None:
    status: dict[str, Any] = get_llmd(api, namespace, name).get("status") or {}
    generation: int | None = status.get("observedGeneration")
    return generation


def max_replicas(api: client.ApiClient, namespace: str, name: str) -> int:
    hpa = client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(name, namespace)
    return int(hpa.spec.max_replicas)


def test_a_spec_change_reaches_the_children_and_only_status_is_written(
    operator: Operator, api: client.ApiClient, cluster: Cluster, namespace: str
) -> None:
    apply(cluster, namespace, llmd("loop", autoscaling={"minReplicas": 1, "maxReplicas": 2}))
    wait_until(lambda: observed(api, namespace, "loop") == 1, what="generation 1 reconciled")
    assert max_replicas(api, namespace, "loop") == 2
    apply(cluster, namespace, llmd("loop", autoscaling={"minReplicas": 1, "maxReplicas": 3}))
    wait_until(lambda: observed(api, namespace, "loop") == 2, what="generation 2 reconciled")
    assert max_replicas(api, namespace, "loop") == 3
    meta = get_llmd(api, namespace, "loop")["metadata"]
    written = [k for k in meta.get("annotations") or {} if not k.startswith(CLIENTS_OWN)]
    assert (written, meta.get("finalizers")) == ([], None)
