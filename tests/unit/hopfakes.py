"""In-process stand-ins around the router hop for its unit tests: engines that serve some adapters
(vLLM's 404 for the others) and stream like vLLM, a vllm-router that says it answered, and the
hop itself in front of them, all on loopback addresses of this machine (engines share one port on
127.0.0.x addresses, as engine pods share one port on their pod IPs)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from llmfleet.reconcile.llmdeployment.adapter_marks import mark_condition
from llmfleet.routerhop.admission import Room
from llmfleet.routerhop.engines import EngineTable
from llmfleet.routerhop.hop import Hop, HopConfig
from llmfleet.routerhop.passthrough import upstream_session

BASE = "tiny"
ROUTER_METRICS = b"# TYPE vllm_router_requests_total counter\nvllm_router_requests_total 3\n"
# An SSE stream as vLLM sends one: a chunk per token, then [DONE].
STREAM_CHUNKS = 5
CHUNK_GAP_SECONDS = 0.2


@dataclass
class Answered:
    """Who answered what: (server name, model, Authorization header) per request."""

    calls: list[tuple[str, str | None, str | None]] = field(default_factory=list)


def engine_app(name: str, serving: set[str], log: Answered) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else {}
        model = body.get("model")
        log.calls.append((name, model, request.headers.get("Authorization")))
        if model != BASE and model not in serving:
            err = {"message": f"The model `{model}` does not exist.", "type": "NotFoundError"}
            return web.json_response({"error": {**err, "param": "model", "code": 404}}, status=404)
        if not body.get("stream"):
            return web.json_response({"served_by": name, "model": model})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(STREAM_CHUNKS):
            await response.write(f"data: {json.dumps({'i': i, 'by': name})}\n\n".encode())
            await asyncio.sleep(CHUNK_GAP_SECONDS)
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def router_app(log: Answered) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        model = json.loads(raw).get("model") if raw.startswith(b"{") else None
        log.calls.append(("router", model, request.headers.get("Authorization")))
        if request.path == "/health":
            return web.Response(text="ok")
        if request.headers.get("Authorization") == "Bearer wrong":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.json_response(
            {"served_by": "router", "model": model, "path": request.path_qs},
            headers={"X-Router": "yes"},
        )

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=ROUTER_METRICS, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def pod(name: str, ip: str, serving: list[str], ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"},
                mark_condition(serving),
            ],
        },
    }


async def _site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound: int = runner.addresses[0][1]
    return runner, bound


@dataclass
class Lab:
    hop_url: str
    metrics_url: str
    table: EngineTable
    hop: Hop
    log: Answered
    engine_port: int
    session: aiohttp.ClientSession


# Room enough that the adapter and pass-through tests never wait for it.
AMPLE_ROOM = Room(slots_per_engine=64, queue_per_engine=0, routers=1)


@asynccontextmanager
async def lab(
    engines: dict[str, set[str]],
    hold_seconds: float = 2.0,
    room: Room = AMPLE_ROOM,
    admit_seconds: float = 2.0,
) -> AsyncIterator[Lab]:
    """Engines by IP (127.0.0.2, ...) -> the adapters each serves; the hop's table starts with
    each marked as serving exactly those, and the hop's list of adapters is sql and chat."""
    log = Answered()
    runners: list[web.AppRunner] = []
    port = 0
    for i, (ip, serving) in enumerate(sorted(engines.items())):
        runner, port = await _site(engine_app(f"engine-{i}", serving, log), ip, port)
        runners.append(runner)
    router, router_port = await _site(router_app(log), "127.0.0.1", 0)
    runners.append(router)
    table = EngineTable(random.Random(3))
    table.replace(
        [pod(f"engine-{i}", ip, sorted(s)) for i, (ip, s) in enumerate(sorted(engines.items()))]
    )
    config = HopConfig(
        base_models=frozenset({BASE}),
        adapters=frozenset({"sql", "chat"}),
        router_url=f"http://127.0.0.1:{router_port}",
        router_metrics_url=f"http://127.0.0.1:{router_port}/metrics",
        engine_port=port,
        hold_seconds=hold_seconds,
        retry_after_seconds=5,
        room=room,
        admit_seconds=admit_seconds,
    )
    async with upstream_session() as upstream, aiohttp.ClientSession() as client:
        hop = Hop(config, table, upstream)
        hop_runner = hop.runner(drain_seconds=0.1)
        await hop_runner.setup()
        await web.TCPSite(hop_runner, "127.0.0.1", 0).start()
        hop_port = hop_runner.addresses[0][1]
        metrics_runner, metrics_port = await _site(hop.metrics_app(), "127.0.0.1", 0)
        runners += [hop_runner, metrics_runner]
        try:
            yield Lab(
                f"http://127.0.0.1:{hop_port}",
                f"http://127.0.0.1:{metrics_port}",
                table,
                hop,
                log,
                port,
                client,
            )
        finally:
            for runner in reversed(runners):
                await runner.cleanup()
