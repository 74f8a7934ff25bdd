"""A Service that leads the API server's aggregation layer to a process on 127.0.0.1: what an
APIService (prometheus-adapter's custom.metrics, KEDA's external.metrics) names on this cluster.

The API server runs with --enable-aggregator-routing, so it resolves an APIService's Service
through its EndpointSlices (an ExternalName Service is refused there: "unsupported service
type"). EndpointSlice validation refuses loopback IPs but not an FQDN address, and the
aggregator dials an endpoint's first address as given: an FQDN slice holding "127.0.0.1" leads
to the process's port on loopback. No selector, so no controller owns the slice."""

from __future__ import annotations

from typing import Any


def aggregated_service(
    name: str, namespace: str, port: int, labels: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The Service `name` and its EndpointSlice to 127.0.0.1:`port`, both carrying `labels`."""
    svc_meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        svc_meta["labels"] = dict(labels)
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": svc_meta,
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": "https", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-loopback",
            "namespace": namespace,
            "labels": {
                **(labels or {}),
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "llmfleet-localcluster",
            },
        },
        "addressType": "FQDN",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }
    return [svc, slice_]
