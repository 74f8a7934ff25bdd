"""The waits of MetricsStack.start(): until each component answers its health check, then until
the adapter's APIServices are Available to the aggregator."""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
from pathlib import Path
from typing import Any

import yaml

from . import cluster_objects
from .client import StackClient
from .files import NAME


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs and is no zombie: the supervisor's health here, and in stack.py's
    running() and stop."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class StackReadiness(StackClient):
    """The part of MetricsStack (stack.py) that waits for a started stack to serve."""

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
                if not pid_alive(pid):
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

    # Here beside _register, its main user; _launch applies the RBAC with it too.
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
