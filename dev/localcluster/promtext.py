"""Reading a Prometheus text endpoint directly (an engine's or the router's /metrics), for tests
that must see one pod's counters rather than what Prometheus aggregated."""

from __future__ import annotations

import urllib.request


def scrape(url: str, timeout: float = 5) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value}; {} when the endpoint does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(metrics: dict[str, float], name: str, *label_parts: str) -> float:
    """Sum of `name` over its series whose labels contain every one of `label_parts`."""
    return sum(
        v
        for k, v in metrics.items()
        if (k == name or k.startswith(name + "{")) and all(p in k for p in label_parts)
    )


def per_worker(metrics: dict[str, float], name: str) -> dict[str, float]:
    """{engine IP: value} of a router metric labelled worker="http://IP:8000"."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key.startswith(name + "{") and 'worker="http://' in key:
            ip = key.split('worker="http://', 1)[1].split(":", 1)[0]
            out[ip] = out.get(ip, 0.0) + value
    return out
