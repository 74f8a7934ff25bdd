"""The objects the metrics stack needs in the cluster: its namespace and RBAC, the adapter's
Service and EndpointSlice, and the custom-metrics APIServices."""

from __future__ import annotations

from typing import Any

from ..loopback import aggregated_service
from .identities import ADAPTER, KSM, PROMETHEUS
from .names import ADAPTER_SERVICE, NAMESPACE

CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"
# The HPA controller asks discovery for the preferred version; the adapter serves both.
CUSTOM_METRICS_VERSIONS = ("v1beta1", "v1beta2")


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _binding(kind: str, name: str, role_kind: str, role: str, user: str, ns: str = "") -> Any:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


READ = ["get", "list", "watch"]


def rbac() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        # Prometheus: pod discovery.
        _cluster_role(
            "llmfleet-metrics:prometheus",
            [{"apiGroups": [""], "resources": ["pods", "nodes", "services"], "verbs": READ}],
        ),
        _binding(
            "ClusterRoleBinding",
            "llmfleet-metrics:prometheus",
            "ClusterRole",
            "llmfleet-metrics:prometheus",
            PROMETHEUS.user,
        ),
        # kube-state-metrics: list/watch what it exports.
        _cluster_role(
            "llmfleet-metrics:kube-state-metrics",
            [
                {"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"], "verbs": READ},
                {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": READ},
                {
                    "apiGroups": ["autoscaling"],
                    "resources": ["horizontalpodautoscalers"],
                    "verbs": READ,
                },
                {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": READ},
            ],
        ),
        _binding(
            "ClusterRoleBinding",
            "llmfleet-metrics:kube-state-metrics",
            "ClusterRole",
            "llmfleet-metrics:kube-state-metrics",
            KSM.user,
        ),
        # prometheus-adapter: map series to pods/namespaces ...
        _cluster_role(
            "llmfleet-metrics:prometheus-adapter",
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "nodes", "namespaces", "services"],
                    "verbs": READ,
                }
            ],
        ),
        _binding(
            "ClusterRoleBinding",
            "llmfleet-metrics:prometheus-adapter",
            "ClusterRole",
            "llmfleet-metrics:prometheus-adapter",
            ADAPTER.user,
        ),
        # ... and delegate authentication and authorization to the API server: TokenReviews and
        # SubjectAccessReviews (system:auth-delegator), the request-header CA from kube-system.
        _binding(
            "ClusterRoleBinding",
            "llmfleet-metrics:prometheus-adapter:auth-delegator",
            "ClusterRole",
            "system:auth-delegator",
            ADAPTER.user,
        ),
        _binding(
            "RoleBinding",
            "llmfleet-metrics:prometheus-adapter:auth-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            ADAPTER.user,
            ns="kube-system",
        ),
    ]


def adapter_service(port: int) -> list[dict[str, Any]]:
    """The Service the APIServices name, leading to prometheus-adapter on 127.0.0.1
    (loopback.py)."""
    return aggregated_service(ADAPTER_SERVICE, NAMESPACE, port)


def apiservices(port: int, ca_bundle_b64: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{v}.{CUSTOM_METRICS_GROUP}"},
            "spec": {
                "group": CUSTOM_METRICS_GROUP,
                "version": v,
                "service": {"namespace": NAMESPACE, "name": ADAPTER_SERVICE, "port": port},
                "caBundle": ca_bundle_b64,
                "groupPriorityMinimum": 100,
                "versionPriority": 200 if v == "v1beta2" else 100,
            },
        }
        for v in CUSTOM_METRICS_VERSIONS
    ]


def apiservice_names() -> list[str]:
    return [f"{v}.{CUSTOM_METRICS_GROUP}" for v in CUSTOM_METRICS_VERSIONS]
