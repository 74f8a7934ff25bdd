"""The engine Service: spans every layout, so traffic flows during a layout change."""

from __future__ import annotations

from typing import Any

from llmfleet.render.names import HTTP_PORT, Owner, metadata, selector_labels


def render_service(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, owner.name),
        "spec": {
            "selector": selector_labels(owner),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def endpoint_url(owner: Owner) -> str:
    return f"http://{owner.name}.{owner.namespace}.svc:{HTTP_PORT}/v1"
