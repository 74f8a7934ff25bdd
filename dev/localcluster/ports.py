"""The local cluster's addresses: every port it listens on and the loopback networks its pods
get, all on 127.0.0.1 and shifted by LLMFLEET_CLUSTER_INDEX so that clusters run side by side."""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass

# Several local clusters can run side by side (a developer's and a clean-clone CI check): the
# index shifts every port by 1000 and the loopback pod networks by 10 in the second octet.
CLUSTER_INDEX = int(os.environ.get("LLMFLEET_CLUSTER_INDEX", "0"))
# Pod IPs come from here: loopback, so every dial of a pod IP stays on this machine.
POD_CIDR = f"127.{16 + 10 * CLUSTER_INDEX}.0.1/16"
# The node runner's pods (real processes) bind to addresses from here.
RUNNER_POD_NETWORK = f"127.{17 + 10 * CLUSTER_INDEX}.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # ClusterIPs are data only, never dialled


@dataclass(frozen=True)
class Ports:
    apiserver: int = 16443 + 1000 * CLUSTER_INDEX
    etcd_client: int = 12379 + 1000 * CLUSTER_INDEX
    etcd_peer: int = 12380 + 1000 * CLUSTER_INDEX
    controller_manager: int = 10257 + 1000 * CLUSTER_INDEX
    scheduler: int = 10259 + 1000 * CLUSTER_INDEX
    kwok: int = 10247 + 1000 * CLUSTER_INDEX
    lws_webhook: int = 10263 + 1000 * CLUSTER_INDEX
    lws_metrics: int = 10264 + 1000 * CLUSTER_INDEX
    lws_health: int = 10265 + 1000 * CLUSTER_INDEX
    keda_metrics: int = 10266 + 1000 * CLUSTER_INDEX  # operator's Prometheus metrics
    keda_health: int = 10267 + 1000 * CLUSTER_INDEX  # operator's /healthz, /readyz
    keda_grpc: int = 10268 + 1000 * CLUSTER_INDEX  # operator's metrics service (adapter's gRPC)
    keda_adapter: int = 10269 + 1000 * CLUSTER_INDEX  # external.metrics.k8s.io (HTTPS)
    keda_adapter_metrics: int = 10270 + 1000 * CLUSTER_INDEX  # adapter's Prometheus metrics

    @classmethod
    def shifted(cls, by: int) -> Ports:
        """Every port `by` higher: a second cluster beside the shared one (a test's own)."""
        base = cls()
        return cls(**{f.name: getattr(base, f.name) + by for f in dataclasses.fields(cls)})


def free_port() -> int:
    """A loopback port free right now, for a helper that runs beside the cluster (an operator
    process, the metrics stack, an object store) and has no fixed port of its own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
