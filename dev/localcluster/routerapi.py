"""What a vLLM Router pod says about its engines, read from its own HTTP API."""

from __future__ import annotations

import json
import urllib.request

ROUTER_PORT = 8000


def routed_engines(router_ip: str, port: int = ROUTER_PORT) -> set[str]:
    """IPs of the engines the router sends requests to now: those its /workers lists as
    registered and healthy (empty while the router does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{router_ip}:{port}/workers", timeout=5) as r:
            listed = json.load(r)["workers"]
    except OSError:
        return set()
    return {w["url"].split("//", 1)[1].split(":", 1)[0] for w in listed if w["is_healthy"]}
