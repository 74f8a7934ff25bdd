"""Start, reuse, query and stop the metrics stack of a local cluster.

    stack = MetricsStack(cluster).start()   # idempotent: reuses a running stack
    stack.prometheus_url                     # http://127.0.0.1:<port>
    stack.scrape("llmfleet-operator", f"127.0.0.1:{operator.metrics_port}")
    stack.query('vllm:num_requests_waiting')
    stack.custom_metric("my-namespace")      # what the HPA controller reads

Everything lives under <state dir>/metrics-stack/ (config, certificates, kubeconfigs, TSDB, logs);
the supervisor's pidfile is <state dir>/metrics-stack.pid, so Cluster.down() stops it.

This module starts and stops the stack's supervisor (run.py); MetricsStack's other parts are its
bases: the paths (files.py), what it asks of the running stack (client.py) and the waits of
start() (readiness.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ..ports import free_port
from ..processes import with_dev_pythonpath
from ..supervisor import BUILD_TOOLS, ahead_of_workloads, bindir
from . import cluster_objects, identities
from .cmdlines import adapter_cmd, ksm_cmd, prometheus_cmd
from .files import NAME
from .identities import ADAPTER, KSM
from .names import StackPorts
from .readiness import StackReadiness, pid_alive
from .scrape_config import OPERATOR_JOB, SCRAPE_INTERVAL, prometheus_config

__all__ = ["MetricsStack"]


@dataclass
class MetricsStack(StackReadiness):
    # How often Prometheus scrapes the engine pods (the other jobs: SCRAPE_INTERVAL).
    engine_scrape_interval: str = SCRAPE_INTERVAL

    # --- lifecycle --------------------------------------------------------------------------

    def running(self) -> bool:
        try:
            pid = int(self.pidfile.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return False
        return pid_alive(pid) and str(self.cluster.state_dir).encode() in cmdline

    def start(self, timeout: float = 120) -> MetricsStack:
        """Start the stack (or reuse the running one) and wait until the HPA controller can read
        custom metrics through it."""
        subprocess.run(
            [str(BUILD_TOOLS), "prometheus", "prometheus-adapter", "kube-state-metrics"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        if self.running() and self.spec_file.exists():
            self._write_prometheus_config(self.ports, reload=True)
        else:
            self._stop_supervisor()
            self._launch()
        self._wait_ready(deadline)
        self._register(deadline)
        return self

    @contextlib.contextmanager
    def engines_scraped_every(self, interval: str) -> Iterator[MetricsStack]:
        """Scrape the engine pods every `interval` inside the block (a benchmark measuring with
        the chart's PodMonitor interval) and every SCRAPE_INTERVAL again after it."""
        self.engine_scrape_interval = interval
        self._write_prometheus_config(self.ports, reload=True)
        try:
            yield self
        finally:
            self.engine_scrape_interval = SCRAPE_INTERVAL
            self._write_prometheus_config(self.ports, reload=True)

    def stop(self) -> None:
        """Remove the APIServices, then stop every process of the stack."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self.cluster.kubectl(
                "delete", "apiservice", *cluster_objects.apiservice_names(), "--ignore-not-found"
            )
        self._stop_supervisor()

    def _launch(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.targets_dir.mkdir(exist_ok=True)
        identities.ensure_certs(self.cluster.pki_dir, self.pki)
        ca = self.cluster.pki_dir / "ca.crt"
        for ident in identities.IDENTITIES:
            cfg = identities.kubeconfig(self.cluster.server, ca, self.pki, ident)
            self.kubeconfig_for(ident.stem).write_text(yaml.safe_dump(cfg, sort_keys=True))
        self._apply(cluster_objects.rbac())
        ports = StackPorts(
            prometheus=free_port(),
            adapter=free_port(),
            ksm=free_port(),
            ksm_telemetry=free_port(),
        )
        self._write_prometheus_config(ports, reload=False)
        if not (self.targets_dir / f"{OPERATOR_JOB}.json").exists():
            (self.targets_dir / f"{OPERATOR_JOB}.json").write_text("[]\n")
        processes = {
            "prometheus": prometheus_cmd(
                bindir("prometheus") / "prometheus",
                self.home / "prometheus.yml",
                self.home / "prometheus-data",
                ports,
            ),
            "kube-state-metrics": ksm_cmd(
                bindir("kube-state-metrics") / "kube-state-metrics",
                self.kubeconfig_for(KSM.stem),
                ports,
            ),
            "prometheus-adapter": adapter_cmd(
                bindir("prometheus-adapter") / "adapter",
                self.kubeconfig_for(ADAPTER.stem),
                self.pki,
                ports,
            ),
        }
        spec = {
            "ports": asdict(ports),
            "processes": processes,
            "kubectl": [
                str(self.cluster.kubectl_path()),
                f"--kubeconfig={self.cluster.kubeconfig}",
            ],
            "apiservices": cluster_objects.apiservice_names(),
        }
        self.spec_file.write_text(json.dumps(spec, indent=2) + "\n")
        with open(self.log(NAME), "ab") as logf:
            proc = ahead_of_workloads(
                [
                    sys.executable,
                    "-m",
                    "localcluster.metricsstack.run",
                    f"--state-dir={self.cluster.state_dir}",
                ],
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                env={
                    **os.environ,
                    "PYTHONPATH": with_dev_pythonpath(os.environ.get("PYTHONPATH")),
                },
            )
        self.pidfile.write_text(str(proc.pid))

    def _stop_supervisor(self, grace: float = 15) -> None:
        try:
            pid = int(self.pidfile.read_text())
        except (OSError, ValueError):
            return
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and pid_alive(pid):
                time.sleep(0.1)
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self.pidfile.unlink(missing_ok=True)

    def _write_prometheus_config(self, ports: StackPorts, reload: bool) -> None:
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        cfg = prometheus_config(
            self.cluster.server,
            self.cluster.pki_dir / "ca.crt",
            self.pki,
            ports,
            self.targets_dir,
            self.rules_dir,
            self.engine_scrape_interval,
        )
        path = self.home / "prometheus.yml"
        text = yaml.safe_dump(cfg, sort_keys=False)
        if path.exists() and path.read_text() == text:
            return
        path.write_text(text)
        if reload:
            self._http(f"{self.prometheus_url}/-/reload", method="POST")
