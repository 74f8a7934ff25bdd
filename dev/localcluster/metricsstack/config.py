"""What the metrics stack runs: Prometheus's configuration, the three components' command lines,
their identities (client certificates signed by the cluster CA) and the objects they need in the
cluster (RBAC, the adapter's Service, EndpointSlice and APIServices)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..loopback import aggregated_service
from ..supervisor import REPO

NAMESPACE = "llmfleet-monitoring"
ADAPTER_SERVICE = "prometheus-adapter"
# The adapter's rules exactly as the chart ships them.
ADAPTER_RULES = REPO / "charts" / "llmfleet" / "files" / "prometheus-adapter-rules.yaml"
CUSTOM_METRICS_GROUP = "custom.metrics.k8s.io"
# The HPA controller asks discovery for the preferred version; the adapter serves both.
CUSTOM_METRICS_VERSIONS = ("v1beta1", "v1beta2")
# Short for tests (production: 15-30 s scrapes, the adapter's 10 min relist).
SCRAPE_INTERVAL = "2s"
RELIST_INTERVAL = "5s"
# How far back a relist looks for series (the adapter's default: the relist interval). An engine
# busy enough to need scaling can miss a few scrapes in a row on this machine; with 5 s the
# metric vanished from the adapter ("could not find the metric") exactly when it mattered.
# Production keeps the default (10 min relist, 10 min look-back).
METRICS_MAX_AGE = "5m"
# kube-state-metrics: what the dashboards and alerts read, nothing more.
KSM_RESOURCES = (
    "pods",
    "deployments",
    "replicasets",
    "horizontalpodautoscalers",
    "nodes",
    "namespaces",
    "poddisruptionbudgets",
)
ENGINE_JOB = "kubernetes-pods"
OPERATOR_JOB = "llmfleet-operator"
KSM_JOB = "kube-state-metrics"
# Every scrape address must be on loopback: nothing outside 127.0.0.0/8 is ever dialled.
LOOPBACK_ADDRESS = r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}:\d+"


@dataclass(frozen=True)
class Identity:
    stem: str  # file stem under the stack's pki directory
    user: str  # the Kubernetes user (certificate CN)


PROMETHEUS = Identity("prometheus", "llmfleet-metrics:prometheus")
KSM = Identity("kube-state-metrics", "llmfleet-metrics:kube-state-metrics")
ADAPTER = Identity("prometheus-adapter", "llmfleet-metrics:prometheus-adapter")
IDENTITIES = (PROMETHEUS, KSM, ADAPTER)


@dataclass(frozen=True)
class StackPorts:
    prometheus: int
    adapter: int
    ksm: int
    ksm_telemetry: int


# --- certificates -------------------------------------------------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _sign(ca_dir: Path, out: Path, stem: str, subject: str, ext: str) -> None:
    key, csr, extfile = out / f"{stem}.key", out / f"{stem}.csr", out / f"{stem}.ext"
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    extfile.write_text(ext)
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_dir / "ca.crt"),
        "-CAkey",
        str(ca_dir / "ca.key"),
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        str(extfile),
        "-out",
        str(out / f"{stem}.crt.tmp"),
    )
    (out / f"{stem}.crt.tmp").rename(out / f"{stem}.crt")
    csr.unlink()
    extfile.unlink()


def ensure_certs(ca_dir: Path, out: Path) -> None:
    """A client certificate per component and the adapter's serving certificate, signed by the
    cluster CA (so the aggregator can verify the adapter with the CA as caBundle)."""
    out.mkdir(parents=True, exist_ok=True)
    client = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
    for ident in IDENTITIES:
        if not (out / f"{ident.stem}.crt").exists():
            _sign(ca_dir, out, ident.stem, f"/CN={ident.user}", client)
    if not (out / "adapter-serving.crt").exists():
        # The aggregator checks the name <service>.<namespace>.svc.
        sans = f"DNS:{ADAPTER_SERVICE}.{NAMESPACE}.svc,DNS:localhost,IP:127.0.0.1"
        _sign(
            ca_dir,
            out,
            "adapter-serving",
            f"/CN={ADAPTER_SERVICE}.{NAMESPACE}.svc",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
        )


def kubeconfig(server: str, ca: Path, pki: Path, ident: Identity) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "llmfleet-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {
                "name": ident.stem,
                "user": {
                    "client-certificate": str(pki / f"{ident.stem}.crt"),
                    "client-key": str(pki / f"{ident.stem}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "llmfleet-local", "context": {"cluster": "llmfleet-local", "user": ident.stem}}
        ],
        "current-context": "llmfleet-local",
    }


# --- Prometheus ---------------------------------------------------------------------------------


def _keep_loopback() -> dict[str, Any]:
    return {"source_labels": ["__address__"], "regex": LOOPBACK_ADDRESS, "action": "keep"}


def prometheus_config(
    server: str,
    ca: Path,
    pki: Path,
    ports: StackPorts,
    targets_dir: Path,
    rules_dir: Path,
    engine_scrape_interval: str = SCRAPE_INTERVAL,
) -> dict[str, Any]:
    engines = {
        "job_name": ENGINE_JOB,
        # As a PodMonitor without scrapeTimeout gets it: the timeout is the interval (Prometheus's
        # 10 s global default is capped at it).
        "scrape_interval": engine_scrape_interval,
        "scrape_timeout": engine_scrape_interval,
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "api_server": server,
                "tls_config": {
                    "ca_file": str(ca),
                    "cert_file": str(pki / f"{PROMETHEUS.stem}.crt"),
                    "key_file": str(pki / f"{PROMETHEUS.stem}.key"),
                },
            }
        ],
        "relabel_configs": [
            # The annotations the operator renders on engine pods.
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                "regex": "true",
                "action": "keep",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "Pending|Succeeded|Failed",
                "action": "drop",
            },
            {
                "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
            },
            {
                "source_labels": [
                    "__meta_kubernetes_pod_ip",
                    "__meta_kubernetes_pod_annotation_prometheus_io_port",
                ],
                "regex": r"(.+);(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            _keep_loopback(),
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_label_llmfleet_dev_deployment"],
                "target_label": "llmdeployment",
            },
        ],
    }
    operator = {
        "job_name": OPERATOR_JOB,
        "honor_labels": True,
        # Tests register the operator's 127.0.0.1:<port> here (MetricsStack.scrape).
        "file_sd_configs": [
            {"files": [str(targets_dir / f"{OPERATOR_JOB}.json")], "refresh_interval": "2s"}
        ],
        "relabel_configs": [_keep_loopback()],
    }
    ksm = {
        "job_name": KSM_JOB,
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{ports.ksm}"]}],
        "relabel_configs": [_keep_loopback()],
    }
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        # Tests load rule files here (MetricsStack.load_rules), e.g. the chart's alerts.
        "rule_files": [str(rules_dir / "*.yaml")],
        "scrape_configs": [engines, operator, ksm],
    }


# --- command lines ------------------------------------------------------------------------------


def prometheus_cmd(binary: Path, config: Path, data: Path, ports: StackPorts) -> list[str]:
    return [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=2d",
        f"--web.listen-address=127.0.0.1:{ports.prometheus}",
        "--web.enable-lifecycle",  # POST /-/reload after a config change
        "--log.level=warn",
    ]


def ksm_cmd(binary: Path, kubeconfig_path: Path, ports: StackPorts) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig_path}",
        "--host=127.0.0.1",
        f"--port={ports.ksm}",
        "--telemetry-host=127.0.0.1",
        f"--telemetry-port={ports.ksm_telemetry}",
        f"--resources={','.join(KSM_RESOURCES)}",
        "--metric-labels-allowlist=pods=[llmfleet.dev/deployment]",
    ]


def adapter_cmd(binary: Path, kubeconfig_path: Path, pki: Path, ports: StackPorts) -> list[str]:
    return [
        str(binary),
        f"--config={ADAPTER_RULES}",
        f"--prometheus-url=http://127.0.0.1:{ports.prometheus}/",
        f"--metrics-relist-interval={RELIST_INTERVAL}",
        f"--metrics-max-age={METRICS_MAX_AGE}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.adapter}",
        f"--tls-cert-file={pki / 'adapter-serving.crt'}",
        f"--tls-private-key-file={pki / 'adapter-serving.key'}",
        # Everything the adapter asks of the API server, as its own identity: listing pods and
        # namespaces, TokenReviews/SubjectAccessReviews (delegated authn/authz) and the front
        # proxy's CA from kube-system/extension-apiserver-authentication.
        f"--lister-kubeconfig={kubeconfig_path}",
        f"--authentication-kubeconfig={kubeconfig_path}",
        f"--authorization-kubeconfig={kubeconfig_path}",
        "--v=2",
    ]


# --- objects in the cluster ---------------------------------------------------------------------


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
