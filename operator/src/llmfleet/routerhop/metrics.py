"""The hop's Prometheus metrics, served on the router pod's `metrics` port (the one the chart's
PodMonitor scrapes for every router) together with vllm-router's own, which moved to loopback:
one scrape reads both, so the dashboards and the scale-from-zero trigger read the router's series
where they always did. Adapter labels are the LLMDeployment's adapters only (at most
spec.adapters' 64): an unknown model never becomes a label."""

from __future__ import annotations

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

UPSTREAM_TIMEOUT_SECONDS = 5.0


class HopMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.held = Gauge(
            "llmfleet_router_hop_requests_held",
            "Requests waiting in the hop: for room on the engines, or for an engine that serves "
            "their adapter.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "llmfleet_router_hop_requests_in_flight",
            "Requests this hop passed on that have not finished yet.",
            registry=self.registry,
        )
        self.room = Gauge(
            "llmfleet_router_hop_room",
            "Requests this hop may have in flight: its share of the Ready engines' sequences "
            "and short queues.",
            registry=self.registry,
        )
        self.no_room = Counter(
            "llmfleet_router_hop_no_room_requests",
            "Requests answered 503: no room on the engines came within the hold.",
            registry=self.registry,
        )
        self.routed = Counter(
            "llmfleet_router_hop_routed_requests",
            "Requests for an adapter sent to an engine marked as serving it.",
            ["adapter"],
            registry=self.registry,
        )
        self.unavailable = Counter(
            "llmfleet_router_hop_unavailable_requests",
            "Requests for an adapter answered 503: no engine served it within the hold.",
            ["adapter"],
            registry=self.registry,
        )
        self.unknown = Counter(
            "llmfleet_router_hop_unknown_model_requests",
            "Requests naming a model that is neither the base nor an adapter (answered 404).",
            registry=self.registry,
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)


async def scrape(session: aiohttp.ClientSession, url: str) -> bytes:
    """vllm-router's own metrics, or nothing while it does not answer (the hop's still count)."""
    try:
        timeout = aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_SECONDS)
        async with session.get(url, timeout=timeout) as resp:
            if resp.status == 200:
                body = await resp.read()
                return body if body.endswith(b"\n") or not body else body + b"\n"
    except (aiohttp.ClientError, TimeoutError):
        pass
    return b""
