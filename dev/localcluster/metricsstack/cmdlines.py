"""The command lines of the stack's three processes (Prometheus, kube-state-metrics,
prometheus-adapter), which MetricsStack writes to stack.json for its supervisor (run.py)."""

from __future__ import annotations

from pathlib import Path

from ..supervisor import REPO
from .names import StackPorts

# The adapter's rules exactly as the chart ships them.
ADAPTER_RULES = REPO / "charts" / "llmfleet" / "files" / "prometheus-adapter-rules.yaml"
# Short for tests (production: the adapter's 10 min relist).
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
