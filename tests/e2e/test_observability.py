"""A chart alert provoked for real and seen firing in the tests' Prometheus (rules loaded with
`for` set to 0, expressions unchanged), with the dashboard panel that shows the same fault: the
operator failing to reconcile (a ResourceQuota forbids the HorizontalPodAutoscaler it must
create), `llmfleet_reconcile_errors_total` by reason, LLMFleetReconcileErrors.

The other six alerts are provoked in test_autoscaling.py (PROVOKED) and
test_observability_kv.py.
"""

from __future__ import annotations

import time

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import GROUP, VERSION, wait_until
from localcluster.metricsstack.scrape_config import OPERATOR_JOB
from localcluster.supervisor import Cluster

from . import observe
from .harness import Operator

pytestmark = [pytest.mark.cluster, pytest.mark.lab("kwok's GPU nodes and the lab's metrics stack")]


@pytest.fixture(scope="module")
def rules(metrics_stack: MetricsStack, operator: Operator) -> MetricsStack:
    metrics_stack.scrape(OPERATOR_JOB, operator.metrics_target)
    observe.load_alert_rules(metrics_stack)
    return metrics_stack


def query_value(stack: MetricsStack, expr: str) -> float:
    result = stack.query(expr)
    return sum(float(r["value"][1]) for r in result)


def test_a_reconcile_the_api_refuses_is_counted_by_reason_and_alerts(
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    rules: MetricsStack,
    e2e_gpu_pool: str,
) -> None:
    name = "quota-bound"
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        namespace,
        {
            "metadata": {"name": "no-autoscalers"},
            "spec": {"hard": {"count/horizontalpodautoscalers.autoscaling": "0"}},
        },
    )
    wait_until(
        lambda: core.read_namespaced_resource_quota("no-autoscalers", namespace).status.hard,
        30,
        0.5,
        "the quota controller setting the quota's status",
    )
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 1, "memoryGiB": 80, "perNode": 8, "product": e2e_gpu_pool},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 2},
        },
    }
    began = time.time()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))

    errors = (
        f'llmfleet_reconcile_errors_total{{kind="LLMDeployment", namespace="{namespace}", '
        f'name="{name}", reason="Forbidden"}}'
    )
    wait_until(lambda: query_value(rules, errors) > 0, 90, 1, "reconcile errors in Prometheus")
    wait_until(
        lambda: "LLMFleetReconcileErrors" in observe.fired_since(rules, namespace, name, began),
        60,
        1,
        "LLMFleetReconcileErrors firing",
    )
    shown = observe.panel(rules, "Reconcile errors by reason", namespace, name)
    assert any(s["metric"].get("reason") == "Forbidden" for s in shown), shown
    # The operator keeps going (no crash loop) and says why on the resource, once.
    refusals = wait_until(
        lambda: [
            e
            for e in core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name}"
            ).items
            if e.involved_object.kind == "LLMDeployment" and e.reason == "ApplyRefused"
        ],
        30,
        1,
        "a Warning Event ApplyRefused on the LLMDeployment",
    )
    assert len(refusals) == 1, [(e.message, e.count) for e in refusals]
    assert refusals[0].type == "Warning"
    assert "exceeded quota: no-autoscalers" in refusals[0].message
    # ... and in status, where `kubectl get` and `describe` look.
    crd = client.CustomObjectsApi(api)

    def degraded() -> dict[str, str]:
        obj = crd.get_namespaced_custom_object(GROUP, VERSION, namespace, "llmdeployments", name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Degraded"), {})

    refused = wait_until(
        lambda: degraded().get("reason") == "ApplyRefused" and degraded(),
        30,
        1,
        "Degraded=True ApplyRefused in status",
    )
    assert refused["status"] == "True", refused
    assert "exceeded quota: no-autoscalers" in refused["message"], refused

    # The quota lifted, the reconcile succeeds and the HPA exists.
    core.delete_namespaced_resource_quota("no-autoscalers", namespace)
    wait_until(
        lambda: (
            client.AutoscalingV2Api(api).list_namespaced_horizontal_pod_autoscaler(namespace).items
        ),
        120,
        1,
        "the HPA created once the quota is gone",
    )
    cleared = wait_until(
        lambda: degraded().get("reason") not in (None, "ApplyRefused") and degraded(),
        60,
        1,
        "Degraded no longer ApplyRefused once every child is applied",
    )
    assert cleared["reason"] != "ApplyRefused", cleared
