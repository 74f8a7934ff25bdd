"""The local cluster's KEDA (github.com/kedacore/keda, built by build-tools.sh with its CRDs and
ClusterRoles from the same module): what upstream's kustomize install applies, pointed at
127.0.0.1, and the command lines of its operator and metrics adapter.

Upstream runs both as Deployments in the namespace `keda` under the ServiceAccount
`keda-operator`, with certificate rotation in the operator: it writes a CA and one certificate
into the Secret `kedaorg-certs`, mounted by both for their gRPC link (mutual TLS) and by the
adapter as its serving certificate, and patches that CA into the APIService. Here both are
processes on 127.0.0.1 (keda_addon.py starts them): rotation is off, the one certificate comes
from pki.py (stem `keda`, signed by the cluster CA, which is the APIService's caBundle), and
each process authenticates with a client certificate of its own bound to what upstream binds to
the ServiceAccount. Leader election is off (one replica). The admission webhooks (a third
binary that only validates ScaledObjects) are not run.

The operator evaluates the triggers (it polls Prometheus every pollingInterval), scales the
target to zero and back from it, and creates the HPA `keda-hpa-<name>`; the adapter serves
`external.metrics.k8s.io` to that HPA, asking the operator over gRPC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .loopback import aggregated_service

NAMESPACE = "keda"  # upstream's; the operator keeps its cluster-scoped objects' Secrets here
API_GROUP = "keda.sh"
CRD_NAME = "scaledobjects.keda.sh"
EXTERNAL_METRICS_GROUP = "external.metrics.k8s.io"
APISERVICE = f"v1beta1.{EXTERNAL_METRICS_GROUP}"
SERVICE = "keda-metrics-apiserver"  # the Service the APIService names, as upstream's
OPERATOR = "keda-operator"  # pidfile, log and kubeconfig stem (and pki.py's client)
ADAPTER = "keda-metrics-apiserver"  # the same for the metrics adapter
OPERATOR_USER = "keda-operator"  # pki.py's client certificate CNs
ADAPTER_USER = "keda-metrics-apiserver"
# The HPA controller reads external metrics as this user (--use-service-account-credentials).
HPA_CONTROLLER = ("kube-system", "horizontal-pod-autoscaler")
# Every object below carries this label, so `kubectl get ... -l` finds what the cluster installed.
LABEL = {"app.kubernetes.io/part-of": "llmfleet-localcluster-keda"}


def crd_files(config: Path) -> list[Path]:
    """Upstream's CRDs (config/crd/bases) as they are. Upstream's kustomize patches only
    tighten validation of fields we never set (stabilizationWindowSeconds bounds, ScaledJob
    container ports' protocol); applied unpatched, the API server accepts what upstream would
    and a little more."""
    return sorted((config / "crd").glob("*.yaml"))


def crd_names(config: Path) -> list[str]:
    return [_load_all(f)[0]["metadata"]["name"] for f in crd_files(config)]


def rbac(config: Path) -> list[dict[str, Any]]:
    """The namespace and what upstream binds to the ServiceAccount keda-operator, here bound to
    the operator's and the adapter's users (the adapter runs as that ServiceAccount upstream,
    so it gets the same): the operator's ClusterRole and its Role in `keda` (Secrets, Leases);
    for the adapter as an extension API server, system:auth-delegator (TokenReviews,
    SubjectAccessReviews) and extension-apiserver-authentication-reader (the front proxy's CA
    in kube-system); and upstream's keda-external-metrics-reader for the HPA controller."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": dict(LABEL)},
        }
    ]
    users = [OPERATOR_USER, ADAPTER_USER]
    for role in _load_all(config / "rbac" / "operator-role.yaml"):
        role["metadata"]["labels"] = {**role["metadata"].get("labels", {}), **LABEL}
        docs.append(role)
        if role["kind"] == "ClusterRole":
            docs.append(_binding("ClusterRoleBinding", role["metadata"]["name"], role, users))
        elif role["kind"] == "Role":
            docs.append(_binding("RoleBinding", role["metadata"]["name"], role, users))
        else:
            raise ValueError(f"operator-role.yaml: unexpected {role['kind']}")
    delegator = {"kind": "ClusterRole", "metadata": {"name": "system:auth-delegator"}}
    docs.append(_binding("ClusterRoleBinding", "keda-system-auth-delegator", delegator, users))
    reader = {
        "kind": "Role",
        "metadata": {
            "name": "extension-apiserver-authentication-reader",
            "namespace": "kube-system",
        },
    }
    docs.append(_binding("RoleBinding", "keda-auth-reader", reader, users))
    (external,) = _load_all(config / "rbac" / "metrics-server-role.yaml")
    if external["kind"] != "ClusterRole":
        raise ValueError(
            f"metrics-server-role.yaml: expected a ClusterRole, got {external['kind']}"
        )
    external["metadata"]["labels"] = {**external["metadata"].get("labels", {}), **LABEL}
    docs.append(external)
    ns, sa = HPA_CONTROLLER
    hpa = _binding("ClusterRoleBinding", "keda-hpa-controller-external-metrics", external, [])
    hpa["subjects"] = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    docs.append(hpa)
    return docs


def adapter_service(port: int) -> list[dict[str, Any]]:
    """The Service the APIService names, leading to the adapter on 127.0.0.1 (loopback.py), as
    the metrics stack's does for prometheus-adapter."""
    return aggregated_service(SERVICE, NAMESPACE, port, LABEL)


def apiservice(port: int, ca_bundle: str) -> dict[str, Any]:
    """Upstream's APIService (config/metrics-server/api_service.yaml) with the caBundle its
    certificate rotation would patch in (`ca_bundle`: base64 PEM of the cluster CA)."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE, "labels": dict(LABEL)},
        "spec": {
            "service": {"name": SERVICE, "namespace": NAMESPACE, "port": port},
            "group": EXTERNAL_METRICS_GROUP,
            "version": "v1beta1",
            "caBundle": ca_bundle,
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def environment(kubeconfig: Path) -> dict[str, str]:
    """What upstream's Deployments set, and what a pod would have had: the namespace the
    ServiceAccount's token directory names (KEDA_CLUSTER_OBJECT_NAMESPACE, else it reads
    /var/run/secrets/...), and the kubeconfig in place of the in-cluster configuration."""
    return {
        "WATCH_NAMESPACE": "",  # every namespace
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(kubeconfig),
    }


def operator_command(
    binary: Path,
    kubeconfig: Path,
    cert_dir: Path,
    ca_dir: Path,
    metrics: str,
    health: str,
    grpc: str,
) -> list[str]:
    """`cert_dir` holds ca.crt, tls.crt and tls.key: the gRPC server's certificate and the CA
    it requires the adapter's (the same) certificate to be signed by. `ca_dir` is what scalers
    trust besides the system's CAs (upstream's /custom/ca)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        # The certificates are ours (pki.py): no Secret written, no APIService patched.
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
        f"--cert-dir={cert_dir}",
        f"--ca-dir={ca_dir}",
        f"--metrics-bind-address={metrics}",
        f"--health-probe-bind-address={health}",
        f"--metrics-service-bind-address={grpc}",
        "--zap-log-level=info",
        "--zap-encoder=console",
        "--zap-time-encoding=iso8601",
    ]


def adapter_command(
    binary: Path,
    kubeconfig: Path,
    cert_dir: Path,
    client_ca: Path,
    port: int,
    metrics_port: int,
    grpc: str,
) -> list[str]:
    """The adapter serves the APIService on 127.0.0.1:`port` with cert_dir's tls.crt, reaches
    the operator at `grpc` with the same certificate, and serves its own metrics on
    `metrics_port` (upstream binds that one to every interface: build-tools.sh patches it to
    127.0.0.1)."""
    return [
        str(binary),
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={cert_dir / 'tls.crt'}",
        f"--tls-private-key-file={cert_dir / 'tls.key'}",
        f"--client-ca-file={client_ca}",
        # Its own identity for everything it asks of the API server: discovery, its
        # ScaledObject cache (KUBECONFIG, read by controller-runtime), delegated authn/authz.
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--metrics-service-address={grpc}",
        f"--port={metrics_port}",
        "--zap-log-level=info",
        "--zap-encoder=console",
        "--zap-time-encoding=iso8601",
    ]


def scaled_object(
    name: str,
    namespace: str,
    target: str,
    prometheus_url: str,
    query: str,
    *,
    threshold: str = "1",
    min_replicas: int = 0,
    max_replicas: int = 1,
    polling_interval: int = 5,
    cooldown_period: int = 15,
) -> dict[str, Any]:
    """A ScaledObject (keda.sh/v1alpha1) scaling the Deployment `target` on a Prometheus query:
    to zero once `query` has been 0 (not above its activation threshold, 0) for
    `cooldown_period` seconds, back to one when it is above it; the HPA scales between one and
    `max_replicas` at `threshold` per replica."""
    return {
        "apiVersion": f"{API_GROUP}/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"name": target},
            "minReplicaCount": min_replicas,
            "maxReplicaCount": max_replicas,
            "pollingInterval": polling_interval,
            "cooldownPeriod": cooldown_period,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": prometheus_url,
                        "query": query,
                        "threshold": threshold,
                    },
                }
            ],
        },
    }


def _binding(kind: str, name: str, role: dict[str, Any], users: list[str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABEL)}
    if kind == "RoleBinding":
        meta["namespace"] = role["metadata"]["namespace"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role["kind"],
            "name": role["metadata"]["name"],
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users
        ],
    }


def _load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
