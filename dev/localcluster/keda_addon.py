"""KEDA (github.com/kedacore/keda) as an add-on of the local cluster (addons.py): its CRDs and
RBAC (keda.py), its operator, and its metrics adapter serving external.metrics.k8s.io through an
APIService that leads to 127.0.0.1."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
from pathlib import Path
from typing import Any

from . import httpwait, keda
from .addons import AddOn
from .api import apiservice_path
from .tools import bindir

OPERATOR = keda.OPERATOR  # pidfile, log and kubeconfig stems
ADAPTER = keda.ADAPTER


class Keda(AddOn):
    name = "keda"
    title = "KEDA"
    env = "LLMFLEET_KEDA"
    processes = (OPERATOR, ADAPTER)
    groups = (keda.API_GROUP, keda.EXTERNAL_METRICS_GROUP)
    crd = keda.CRD_NAME
    # Both read ca.crt, tls.crt and tls.key from their --cert-dir (upstream's Secret
    # kedaorg-certs, mounted at /certs); the operator's scalers trust every file in its --ca-dir
    # besides the system CAs.
    certificates = (
        ("certs/ca.crt", "ca.crt"),
        ("certs/tls.crt", "keda.crt"),
        ("certs/tls.key", "keda.key"),
        ("ca/ca.crt", "ca.crt"),
    )
    timeout = 90

    def crd_files(self, config: Path) -> list[Path]:
        return keda.crd_files(config)

    def crd_names(self, config: Path) -> list[str]:
        return keda.crd_names(config)

    def manifests(self, config: Path) -> list[dict[str, Any]]:
        return [*keda.rbac(config), *keda.adapter_service(self.cluster.ports.keda_adapter)]

    def launch(self, config: Path) -> None:
        c, p = self.cluster, self.cluster.ports
        certs, binaries = self.home / "certs", bindir(self.name)
        c.procs.start(
            OPERATOR,
            keda.operator_command(
                binaries / "keda",
                self.kubeconfig(OPERATOR),
                certs,
                self.home / "ca",
                metrics=f"127.0.0.1:{p.keda_metrics}",
                health=f"127.0.0.1:{p.keda_health}",
                grpc=f"127.0.0.1:{p.keda_grpc}",
            ),
            keda.environment(self.kubeconfig(OPERATOR)),
        )
        c.procs.start(
            ADAPTER,
            keda.adapter_command(
                binaries / "keda-adapter",
                self.kubeconfig(ADAPTER),
                certs,
                c.pki_dir / "ca.crt",
                p.keda_adapter,
                p.keda_adapter_metrics,
                grpc=f"127.0.0.1:{p.keda_grpc}",
            ),
            keda.environment(self.kubeconfig(ADAPTER)),
        )
        # Registered once the adapter is on its way: until it answers, discovery of the group
        # fails for every client of the API server.
        ca = base64.b64encode((c.pki_dir / "ca.crt").read_bytes()).decode()
        c.api.apply_installed([], [keda.apiservice(p.keda_adapter, ca)])

    def state(self) -> dict[str, bool]:
        """What a ScaledObject needs, each True when in place: the processes (`keda-operator`,
        `keda-metrics-apiserver`), the operator's readiness (`operator-ready`), the CRD
        (`crd-established`) and the APIService (`apiservice-available`)."""
        api = self.cluster.api
        return {
            **super().state(),
            "operator-ready": httpwait.answers(
                f"http://127.0.0.1:{self.cluster.ports.keda_health}/readyz"
            ),
            "apiservice-available": api.condition(apiservice_path(keda.APISERVICE), "Available"),
        }

    def not_ready(self) -> str:
        """The operator ready and listening for the adapter, and the aggregator finding the
        adapter's APIService Available (it reached the adapter with TLS and the front proxy's
        certificate). The adapter answers discovery without the operator; a metric read goes
        through to it, hence the gRPC port."""
        state = self.state()
        try:
            with socket.create_connection(("127.0.0.1", self.cluster.ports.keda_grpc), timeout=1):
                state["grpc"] = True
        except OSError:
            state["grpc"] = False
        missing = [k for k, v in state.items() if not v]
        return f"not yet: {', '.join(missing)}" if missing else ""

    def withdraw(self, config: Path) -> None:
        # While the adapter still answers: an APIService whose backend is gone fails discovery
        # of its group, which stalls namespace deletion cluster-wide.
        self.cluster.api.kubectl("delete", "--ignore-not-found", f"apiservice/{keda.APISERVICE}")

    def delete(self, config: Path) -> None:
        """Its CRDs (and with them every ScaledObject; the garbage collector removes the HPAs
        they own), RBAC and the namespace `keda`. Targets stay at the replicas KEDA left them at
        (upstream's default, restoreToOriginalReplicaCount off)."""
        api = self.cluster.api
        crds = keda.crd_names(config)
        # The operator puts finalizers on ScaledObjects and ScaledJobs; it no longer runs to
        # remove them, and the CRDs' deletion would wait on them forever.
        with contextlib.suppress(subprocess.CalledProcessError):
            got = json.loads(api.kubectl("get", ",".join(crds), "-A", "-o", "json"))
            for obj in got["items"]:
                if obj["metadata"].get("finalizers"):
                    group = obj["apiVersion"].split("/")[0]
                    api.kubectl(
                        "patch",
                        f"{obj['kind'].lower()}.{group}/{obj['metadata']['name']}",
                        "-n",
                        obj["metadata"]["namespace"],
                        "--type=merge",
                        "-p",
                        '{"metadata":{"finalizers":null}}',
                    )
        api.delete(*(f"customresourcedefinition/{c}" for c in crds))
        api.delete(docs=list(reversed(keda.rbac(config))))
