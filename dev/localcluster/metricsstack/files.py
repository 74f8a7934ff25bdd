"""Where a metrics stack keeps its things: everything under <state dir>/metrics-stack/ (config,
certificates, kubeconfigs, TSDB, logs, stack.json with the ports), beside the supervisor's pidfile
<state dir>/metrics-stack.pid that Cluster.down() stops; and the URLs the ports give."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..supervisor import Cluster
from .names import StackPorts

NAME = "metrics-stack"


@dataclass
class StackFiles:
    """The base of MetricsStack (stack.py): the cluster it runs on and the paths that follow."""

    cluster: Cluster

    # --- paths ------------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        return self.cluster.state_dir / NAME

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def pidfile(self) -> Path:
        return self.cluster.state_dir / f"{NAME}.pid"

    @property
    def spec_file(self) -> Path:
        return self.home / "stack.json"

    @property
    def targets_dir(self) -> Path:
        return self.home / "targets"

    @property
    def rules_dir(self) -> Path:
        return self.home / "rules"

    @property
    def ports(self) -> StackPorts:
        return StackPorts(**json.loads(self.spec_file.read_text())["ports"])

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def kube_state_metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.ksm}"

    def kubeconfig_for(self, stem: str) -> Path:
        return self.home / f"{stem}.kubeconfig"

    def log(self, component: str) -> Path:
        """Log of `prometheus`, `kube-state-metrics`, `prometheus-adapter` or the supervisor."""
        if component == NAME:
            return self.cluster.state_dir / f"{NAME}.log"
        return self.home / f"{component}.log"
