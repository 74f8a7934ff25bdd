"""What the pods LLMFleet runs are allowed to do, on the real API server: every pod passes the
`restricted` Pod Security Standard (the API server's own PodSecurity admission enforces it), and
with engine.networkPolicy on, each LLMDeployment's engines admit only its router, Prometheus and
the operator.

This cluster has no network plugin, so nothing enforces a NetworkPolicy here: the test checks
what the policy selects, with the API server's own label-selector queries, against the pods and
namespaces that are really there."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION

from .harness import (
    E2E_GPU_PRODUCT,
    OPERATOR_NAMESPACE,
    Operator,
    condition,
    get_llmd,
    helm_template,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.lab("kwok's GPU nodes, on which the pods run")]

COMPONENT = "app.kubernetes.io/component"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def routed_llmd(name: str) -> dict[str, Any]:
    """An 8B model on two of the tests' H100s with room to scale: engines behind the router."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LLMDeployment",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 2, "memoryGiB": 80, "perNode": 8, "product": E2E_GPU_PRODUCT},
            "autoscaling": {"maxReplicas": 4},
        },
    }


def available(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = get_llmd(api, namespace, name)
        return obj if condition(obj, "Available").get("status") == "True" else None

    obj: dict[str, Any] = wait_until(ready, timeout=60, what=f"{name} Available")
    return obj


def selector_text(selector: dict[str, Any]) -> str:
    """A LabelSelector (as the client returns it) in the API server's query syntax."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("match_labels") or {}).items())]
    for expr in selector.get("match_expressions") or []:
        terms.append(f"{expr['key']} {expr['operator'].lower()} ({','.join(expr['values'])})")
    return ",".join(terms)


def pod_names(core: client.CoreV1Api, namespace: str, selector: dict[str, Any]) -> set[str]:
    text = selector_text(selector)
    return {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=text).items}


def test_every_pod_passes_the_restricted_pod_security_standard(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    # The namespace really refuses what `restricted` forbids: a pod that may run as root.
    root = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "runs-as-root"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(namespace, root, dry_run="All")
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body

    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(routed_llmd("chat")))
    available(api, namespace, "chat")
    pods = core.list_namespaced_pod(namespace).items
    components = {p.metadata.labels["app.kubernetes.io/component"] for p in pods}
    assert components == {"engine", "router"}, components
    for pod in pods:
        assert pod.spec.security_context.run_as_non_root is True, pod.metadata.name
        # Every container: a router pod has two (the router hop in front of vllm-router).
        for c in [*(pod.spec.init_containers or []), *pod.spec.containers]:
            where = f"{pod.metadata.name}/{c.name}"
            assert c.security_context.capabilities.drop == ["ALL"], where
            assert c.security_context.allow_privilege_escalation is False, where
            if pod.metadata.labels["app.kubernetes.io/component"] == "router":
                assert c.security_context.read_only_root_filesystem is True, where
    # No ReplicaSet was refused a pod (PodSecurity refuses at pod creation, as FailedCreate).
    events = core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items
    assert [e.message for e in events] == []

    # The chart's operator pod, as Helm renders it, is admitted there too.
    (deployment,) = [d for d in helm_template() if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator"}, **template}
    pod["metadata"] = {"name": "operator", "labels": template["metadata"]["labels"]}
    account = template["spec"]["serviceAccountName"]
    core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    core.create_namespaced_pod(namespace, pod, dry_run="All")
    (c,) = template["spec"]["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True


def test_engines_admit_only_their_router_prometheus_and_the_operator(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    net = client.NetworkingV1Api(api)
    with operator.configured("engine.networkPolicy.enabled=true"):
        cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(routed_llmd("chat"))
        )
        available(api, namespace, "chat")
        policy = net.read_namespaced_network_policy("chat", namespace).to_dict()
        spec = policy["spec"]
        assert spec["policy_types"] == ["Ingress"]

        engines = pod_names(
            core,
            namespace,
            {"match_labels": {"llmfleet.dev/deployment": "chat", COMPONENT: "engine"}},
        )
        routers = pod_names(
            core,
            namespace,
            {"match_labels": {"llmfleet.dev/deployment": "chat", COMPONENT: "router"}},
        )
        assert engines
        assert routers
        assert pod_names(core, namespace, spec["pod_selector"]) == engines

        (rule,) = spec["ingress"]
        assert [(p["port"], p["protocol"]) for p in rule["ports"]] == [("http", "TCP")]
        router_peer, scraper, operator_peer = rule["_from"]
        # The router of this namespace (no namespaceSelector), and only it.
        assert router_peer["namespace_selector"] is None
        assert pod_names(core, namespace, router_peer["pod_selector"]) == routers
        # Prometheus pods of the namespace `monitoring` only, as the chart's default says: a pod
        # label anyone may set is not enough.
        assert scraper["namespace_selector"] == {
            "match_expressions": None,
            "match_labels": {"kubernetes.io/metadata.name": "monitoring"},
        }
        assert scraper["pod_selector"]["match_labels"] == {"app.kubernetes.io/name": "prometheus"}
        # The operator's own pods in the chart's namespace (they read the engines' KV cache).
        selected = core.list_namespace(
            label_selector=selector_text(operator_peer["namespace_selector"])
        ).items
        assert [n.metadata.name for n in selected] == [OPERATOR_NAMESPACE]
        (chart_operator,) = [d for d in helm_template() if d["kind"] == "Deployment"]
        labels = chart_operator["spec"]["template"]["metadata"]["labels"]
        assert operator_peer["pod_selector"]["match_labels"].items() <= labels.items()

    # The value turned off again: the operator removes the policies it made.
    wait_until(
        lambda: not net.list_namespaced_network_policy(namespace).items,
        timeout=30,
        what="the NetworkPolicy pruned",
    )
