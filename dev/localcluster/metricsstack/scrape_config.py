"""Prometheus's configuration (prometheus.yml): the engine pods discovered through the API
server, the operator and kube-state-metrics, every target kept on loopback, and the rule files
tests load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .identities import PROMETHEUS
from .names import StackPorts

# Short for tests (production: 15-30 s scrapes).
SCRAPE_INTERVAL = "2s"
ENGINE_JOB = "kubernetes-pods"
OPERATOR_JOB = "llmfleet-operator"
KSM_JOB = "kube-state-metrics"
# Every scrape address must be on loopback: nothing outside 127.0.0.0/8 is ever dialled.
LOOPBACK_ADDRESS = r"127\.\d{1,3}\.\d{1,3}\.\d{1,3}:\d+"


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
