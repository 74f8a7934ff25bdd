"""The /metrics of idle vLLM engines, answered for kwok's engine pods.

kwok fakes a pod's status and runs none of its containers: an engine pod on a kwok node is
Running and Ready, but nothing listens at its IP. Prometheus then scrapes nothing from it,
prometheus-adapter has no `vllm_num_requests_waiting` for it, and its HorizontalPodAutoscaler
cannot compute (ScalingActive=False, which the operator reports as Degraded AutoscalerBlind).

This process answers GET /metrics at each Running engine pod's IP and Prometheus port
(its prometheus.io annotations), for kwok's pods (IPs from the cluster's kwok pod range) of the
namespaces it is given, with what an engine nobody sends requests to reports: its queue gauges at
0. The HPAs then read the metric through the production path (Prometheus, prometheus-adapter,
custom.metrics.k8s.io) and hold the fleet at minReplicas. Nothing else of an engine is there: no
KV-cache figures (vllm:cache_config_info, so the operator's PlanVerified stays Unknown) and no
OpenAI API.

    python -m localcluster.idleengines --state-dir .cluster --pod-cidr 127.16.0.1/16 \\
        --namespace llmfleet-demo

`start()` runs it with its pid in <state dir>/idle-engines.pid, so `Cluster.down()` stops it.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client, config

from .supervisor import POD_CIDR, Cluster

NAME = "idle-engines"  # pidfile and log stem
ENGINE_SELECTOR = "app.kubernetes.io/component=engine"
POLL_SECONDS = 1.0
# vLLM's queue gauges, as an engine exports them with no request in flight or waiting.
GAUGES = (
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
)


def page(model: str) -> bytes:
    lines = []
    for name, help_text in GAUGES:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} gauge",
            f'{name}{{engine="0",model_name="{model}"}} 0.0',
        ]
    return ("\n".join(lines) + "\n").encode()


def start(cluster: Cluster, namespaces: Iterable[str]) -> None:
    """Run the process for `namespaces` (kept if it runs already)."""
    if not cluster.alive(NAME):
        namespace_args = (f"--namespace={n}" for n in namespaces)
        cluster.start_dev_process(
            NAME, "localcluster.idleengines", f"--pod-cidr={POD_CIDR}", *namespace_args
        )


def stop(cluster: Cluster) -> None:
    cluster.stop(NAME)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body: bytes = self.server.page if self.path == "/metrics" else b""  # type: ignore[attr-defined]
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every 2 s per pod would fill the log


def _served_model(pod: client.V1Pod) -> str:
    args = [*(pod.spec.containers[0].command or []), *(pod.spec.containers[0].args or [])]
    for i, arg in enumerate(args):
        if arg.startswith("--served-model-name="):
            return str(arg.split("=", 1)[1])
        if arg == "--served-model-name" and i + 1 < len(args):
            return str(args[i + 1])
    return "unknown"


def _wanted(
    core: client.CoreV1Api,
    namespaces: list[str],
    kwok: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> dict[tuple[str, int], str]:
    """(pod IP, port) -> served model name, for the Running kwok engine pods."""
    wanted = {}
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns, label_selector=ENGINE_SELECTOR).items:
            notes = pod.metadata.annotations or {}
            ip = pod.status.pod_ip
            if (
                pod.status.phase != "Running"
                or pod.metadata.deletion_timestamp
                or notes.get("prometheus.io/scrape") != "true"
                or not ip
                or ipaddress.ip_address(ip) not in kwok
            ):
                continue
            wanted[(ip, int(notes.get("prometheus.io/port", "8000")))] = _served_model(pod)
    return wanted


def serve(state_dir: Path, namespaces: list[str], pod_cidr: str) -> None:
    api = config.new_client_from_config(config_file=str(state_dir / "kubeconfig"))
    core = client.CoreV1Api(api)
    kwok = ipaddress.ip_network(pod_cidr, strict=False)
    servers: dict[tuple[str, int], ThreadingHTTPServer] = {}
    while True:
        try:
            wanted = _wanted(core, namespaces, kwok)
        except Exception as e:  # the API server restarting: keep serving what is known
            print(f"listing pods failed: {e}", flush=True)
            wanted = dict.fromkeys(servers, "")
        for addr in [a for a in servers if a not in wanted]:
            gone = servers.pop(addr)
            gone.shutdown()
            gone.server_close()
            print(f"stopped {addr[0]}:{addr[1]}", flush=True)
        for addr, model in wanted.items():
            if addr in servers:
                continue
            try:
                server = ThreadingHTTPServer(addr, _Handler)
            except OSError as e:  # a pod's IP reused before its old listener went: next round
                print(f"cannot listen on {addr[0]}:{addr[1]}: {e}", flush=True)
                continue
            server.daemon_threads = True
            server.page = page(model)  # type: ignore[attr-defined]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers[addr] = server
            print(f"serving idle /metrics of {model} at {addr[0]}:{addr[1]}", flush=True)
        time.sleep(POLL_SECONDS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--pod-cidr", required=True, help="kwok's pod range (its --cidr)")
    parser.add_argument("--namespace", action="append", required=True)
    args = parser.parse_args(argv)
    serve(args.state_dir, args.namespace, args.pod_cidr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
