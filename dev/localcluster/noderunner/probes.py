"""Kubelet probes (httpGet, tcpSocket, exec) against a pod's loopback IP, and their schedule."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def resolve_port(port: Any, ports: list[dict[str, Any]]) -> int:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in ports:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"no container port named {port!r}")


def check(
    probe: Mapping[str, Any],
    pod_ip: str,
    ports: list[dict[str, Any]],
    env: Mapping[str, str],
) -> tuple[bool, str]:
    """Run one probe once: (success, message)."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "httpGet" in probe:
            h = probe["httpGet"]
            host = h.get("host") or pod_ip
            if ipaddress.ip_address(host) not in LOOPBACK:  # this machine only, never elsewhere
                return False, f"refusing to probe non-loopback host {host}"
            if str(h.get("scheme", "HTTP")).upper() != "HTTP":
                return False, "only HTTP probes are supported"
            conn = http.client.HTTPConnection(host, resolve_port(h["port"], ports), timeout=timeout)
            try:
                headers = {x["name"]: x["value"] for x in h.get("httpHeaders") or []}
                conn.request("GET", h.get("path") or "/", headers=headers)
                status = conn.getresponse().status
            finally:
                conn.close()
            return 200 <= status < 400, f"HTTP {status}"
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            host = t.get("host") or pod_ip
            if ipaddress.ip_address(host) not in LOOPBACK:
                return False, f"refusing to probe non-loopback host {host}"
            with socket.create_connection((host, resolve_port(t["port"], ports)), timeout):
                return True, "connected"
        if "exec" in probe:
            r = subprocess.run(
                probe["exec"]["command"],
                env=dict(env),
                capture_output=True,
                timeout=timeout,
                check=False,
            )
            return r.returncode == 0, f"exit {r.returncode}"
    except (OSError, ValueError, subprocess.TimeoutExpired, http.client.HTTPException) as e:
        return False, f"{type(e).__name__}: {e}"
    return True, "unsupported probe type: counted as success"


@dataclass
class ProbeState:
    """A probe's schedule and consecutive results, as a kubelet keeps them."""

    spec: Mapping[str, Any]
    next_due: float = 0.0
    successes: int = 0
    failures: int = 0

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds") or 10)

    @property
    def failure_threshold(self) -> int:
        return int(self.spec.get("failureThreshold") or 3)

    @property
    def success_threshold(self) -> int:
        return int(self.spec.get("successThreshold") or 1)

    def reset(self, container_started: float) -> None:
        self.next_due = container_started + float(self.spec.get("initialDelaySeconds") or 0)
        self.successes = self.failures = 0

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def record(self, ok: bool, now: float) -> None:
        self.next_due = now + self.period
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1


def now() -> float:
    return time.monotonic()
