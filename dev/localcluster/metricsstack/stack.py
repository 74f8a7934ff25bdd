"""Start, reuse, query and stop the metrics stack of a local cluster.

    stack = MetricsStack(cluster).start()   # idempotent: reuses a running stack
    stack.prometheus_url                     # http://127.0.0.1:<port>
    stack.scrape("llmfleet-operator", f"127.0.0.1:{operator.metrics_port}")
    stack.query('vllm:num_requests_waiting')
    stack.custom_metric("my-namespace")      # what the HPA controller reads

Everything lives under <state dir>/metrics-stack/ (config, certificates, kubeconfigs, TSDB, logs);
the supervisor's pidfile is <state dir>/metrics-stack.pid, so Cluster.down() stops it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from llmfleet.render.autoscaling import QUEUE_METRIC

from ..supervisor import BUILD_TOOLS, Cluster, ahead_of_workloads, bindir
from . import cluster_objects, identities
from .cmdlines import ADAPTER_RULES, adapter_cmd, ksm_cmd, prometheus_cmd
from .identities import ADAPTER, KSM
from .names import NAMESPACE, StackPorts
from .scrape_config import OPERATOR_JOB, SCRAPE_INTERVAL, prometheus_config

NAME = "metrics-stack"

__all__ = ["ADAPTER_RULES", "NAMESPACE", "QUEUE_METRIC", "MetricsStack"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class MetricsStack:
    cluster: Cluster
    # How often Prometheus scrapes the engine pods (the other jobs: SCRAPE_INTERVAL).
    engine_scrape_interval: str = SCRAPE_INTERVAL

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

    # --- lifecycle --------------------------------------------------------------------------

    def running(self) -> bool:
        try:
            pid = int(self.pidfile.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return False
        return _pid_alive(pid) and str(self.cluster.state_dir).encode() in cmdline

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
            prometheus=_free_port(),
            adapter=_free_port(),
            ksm=_free_port(),
            ksm_telemetry=_free_port(),
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
        dev_dir = Path(__file__).resolve().parents[2]
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
                env={**os.environ, "PYTHONPATH": str(dev_dir)},
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
            while time.monotonic() < deadline and _pid_alive(pid):
                time.sleep(0.1)
            if _pid_alive(pid):
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

    def _wait_ready(self, deadline: float) -> None:
        ports = self.ports
        checks = {
            "prometheus": (f"http://127.0.0.1:{ports.prometheus}/-/ready", None),
            "kube-state-metrics": (f"http://127.0.0.1:{ports.ksm}/healthz", None),
            "prometheus-adapter": (f"https://127.0.0.1:{ports.adapter}/healthz", self._ca_ctx()),
        }
        for what, (url, ctx) in checks.items():
            last: Exception | None = None
            while True:
                # (Not running(): right after the fork the child's cmdline is still ours.)
                pid = int(self.pidfile.read_text())
                if not _pid_alive(pid):
                    raise RuntimeError(f"metrics stack exited; see {self.log(NAME)}")
                try:
                    self._http(url, context=ctx)
                    break
                except (OSError, urllib.error.URLError) as e:
                    last = e
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what} not ready at {url}: {last}; see {self.log(what)}")
                time.sleep(0.3)

    def _register(self, deadline: float) -> None:
        """The adapter's Service, EndpointSlice and APIServices; wait until they are Available
        (the aggregator reached the adapter with TLS and the front-proxy client certificate)."""
        port = self.ports.adapter
        ca = base64.b64encode((self.cluster.pki_dir / "ca.crt").read_bytes()).decode()
        self._apply(
            [*cluster_objects.adapter_service(port), *cluster_objects.apiservices(port, ca)]
        )
        names = cluster_objects.apiservice_names()
        while True:
            got = json.loads(self.cluster.kubectl("get", "apiservice", *names, "-o", "json"))
            unavailable = [
                (a["metadata"]["name"], c.get("message", ""))
                for a in got["items"]
                for c in a.get("status", {}).get("conditions", [])
                if c["type"] == "Available" and c["status"] != "True"
            ]
            available = [
                a
                for a in got["items"]
                for c in a.get("status", {}).get("conditions", [])
                if c["type"] == "Available" and c["status"] == "True"
            ]
            if len(available) == len(names):
                return
            if time.monotonic() > deadline:
                log = self.log("prometheus-adapter")
                raise TimeoutError(f"APIServices not Available: {unavailable}; see {log}")
            time.sleep(0.5)

    def _apply(self, docs: list[dict[str, Any]]) -> None:
        self.cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=llmfleet-metrics-stack",
            "-f",
            "-",
            input="\n---\n".join(yaml.safe_dump(d) for d in docs),
        )

    # --- scrape targets ---------------------------------------------------------------------

    def scrape(self, job: str, *addresses: str) -> None:
        """Set the targets of a file-discovered job (only `llmfleet-operator` is configured);
        Prometheus picks the change up within seconds."""
        if job != OPERATOR_JOB:
            raise ValueError(f"only {OPERATOR_JOB} takes targets from a file")
        tmp = self.targets_dir / f".{job}.json.tmp"
        tmp.write_text(json.dumps([{"targets": list(addresses), "labels": {}}]) + "\n")
        tmp.rename(self.targets_dir / f"{job}.json")

    def load_rules(self, name: str, text: str) -> None:
        """Install a Prometheus rule file as `<name>.yaml` and reload; raises when Prometheus
        refuses it (the reload fails and the old rules stay)."""
        path = self.rules_dir / f"{name}.yaml"
        self.rules_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        try:
            self._http(f"{self.prometheus_url}/-/reload", method="POST")
        except OSError:
            path.unlink()
            raise
        groups = self._api("rules", {})["groups"]
        if not any(g["file"] == str(path) for g in groups):
            raise RuntimeError(f"Prometheus did not load {path}")

    def remove_rules(self, name: str) -> None:
        (self.rules_dir / f"{name}.yaml").unlink(missing_ok=True)
        self._http(f"{self.prometheus_url}/-/reload", method="POST")

    def active_targets(self, job: str | None = None) -> list[dict[str, Any]]:
        data = self._api("targets", {"state": "active"})
        targets: list[dict[str, Any]] = data["activeTargets"]
        return [t for t in targets if job is None or t["labels"].get("job") == job]

    # --- queries ----------------------------------------------------------------------------

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query; the `result` list of its vector (or matrix)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        result: list[dict[str, Any]] = self._api("query", params)["result"]
        return result

    def value(self, expr: str, default: float | None = None) -> float | None:
        """The single value of an instant query (None, or `default`, when it has no sample)."""
        result = self.query(expr)
        if not result:
            return default
        return float(result[0]["value"][1])

    def query_range(
        self, expr: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        result: list[dict[str, Any]] = self._api("query_range", params)["result"]
        return result

    def custom_metric(
        self, namespace: str, metric: str = QUEUE_METRIC, pods: str = "*"
    ) -> dict[str, float]:
        """Pod name -> value, as the custom metrics API serves it to the HPA controller."""
        path = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{pods}/{metric}"
        try:
            got = json.loads(self.cluster.kubectl("get", "--raw", path))
        except subprocess.CalledProcessError as e:
            if "NotFound" in (e.stderr or ""):  # no such series (yet): the adapter relists
                return {}
            raise
        return {
            item["describedObject"]["name"]: _quantity(item["value"])
            for item in got.get("items", [])
        }

    # --- plumbing ---------------------------------------------------------------------------

    def _api(self, endpoint: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.prometheus_url}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
        body = json.loads(self._http(url))
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus {endpoint} {params}: {body}")
        data: dict[str, Any] = body["data"]
        return data

    def _ca_ctx(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cluster.pki_dir / "ca.crt"))

    @staticmethod
    def _http(url: str, method: str = "GET", context: ssl.SSLContext | None = None) -> bytes:
        req = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            body: bytes = resp.read()
            return body


def _quantity(q: str) -> float:
    """A Kubernetes quantity as the custom metrics API writes values ("0", "1500m", "2")."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    if q and q[-1] in suffixes:
        return float(q[:-1]) * suffixes[q[-1]]
    return float(q)
