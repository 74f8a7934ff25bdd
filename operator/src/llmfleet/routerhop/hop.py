"""The hop's request handling: a request that runs on an engine waits for room on the fleet
(admission.py: late binding), then, naming an adapter, goes to an engine marked as serving it,
held (bounded) while none is, and otherwise to vllm-router unchanged, which picks the engine; in
an LLMDeployment with adapters, one naming a model that is neither the base nor an adapter gets
vLLM's 404 at once; everything else (/health, /v1/models...) goes to vllm-router at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import aiohttp
from aiohttp import web

from .admission import Admission, Room
from .engines import Engine, EngineTable
from .metrics import HopMetrics, scrape
from .openai_shapes import (
    lacks_model,
    no_room,
    not_found,
    requested_model,
    takes_room,
    unavailable,
)
from .passthrough import NotServedError, forward

log = logging.getLogger(__name__)

# vllm-router's own limit on a request body (its --max-payload-size default, 536870912 in
# 0.1.17's --help): the hop must not refuse a request the router would take.
MAX_BODY_BYTES = 512 << 20


@dataclass(frozen=True)
class HopConfig:
    base_models: frozenset[str]
    adapters: frozenset[str]
    router_url: str  # vllm-router on loopback: http://127.0.0.1:PORT
    router_metrics_url: str
    engine_port: int
    hold_seconds: float  # for an engine that serves the adapter
    retry_after_seconds: int
    room: Room
    admit_seconds: float  # for room on the engines


class Hop:
    def __init__(
        self,
        config: HopConfig,
        table: EngineTable,
        session: aiohttp.ClientSession,
        metrics: HopMetrics | None = None,
    ) -> None:
        self.config, self.table, self.session = config, table, session
        self.metrics = metrics or HopMetrics()
        self.admission = Admission(config.room, table, self.metrics)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    def runner(self, drain_seconds: float) -> web.AppRunner:
        """The server of app(). A client that goes away cancels its request, as it does in
        vllm-router: a held request stops waiting, and an engine's connection is closed, which
        aborts the generation there."""
        return web.AppRunner(
            self.app(),
            access_log=None,
            handler_cancellation=True,
            shutdown_timeout=drain_seconds,
        )

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.serve_metrics)
        app.router.add_get("/healthz", self.healthz)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if not takes_room(request.method, request.path):
            return await self._to_router(request, body)
        model = requested_model(request.method, request.path, body)
        # An engine marked with it serves it: the operator marks only spec.adapters, and a list
        # that just grew reaches this pod's env only when the router pods roll.
        if model is not None and model not in self.config.base_models:
            if model in self.config.adapters or self.table.serving(model):
                return await self._to_adapter(request, body, model)
            if self.config.adapters:
                self.metrics.unknown.inc()
                return not_found(model)
            # Without adapters the hop routes by no name: vllm-router passes the request on and
            # the engine answers a model it does not serve itself, as before the hop was there.
        return await self._admitted(partial(self._to_router, request, body))

    async def _admitted(
        self, send: Callable[[], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """`send()` once there is room; counted in flight until its answer has been passed on
        (a stream to its end) or its client went away."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        if not await self.admission.enter(self.config.admit_seconds):
            self.metrics.no_room.inc()
            waited = loop.time() - start
            ready = self.table.ready_count()
            return no_room(waited, ready, self.config.retry_after_seconds)
        try:
            return await send()
        finally:
            self.admission.leave()

    async def _to_router(self, request: web.Request, body: bytes) -> web.StreamResponse:
        try:
            return await forward(self.session, request, body, self.config.router_url)
        except aiohttp.ClientConnectionError as e:
            # vllm-router restarting (its container restarts alone): retryable, as its own 503.
            log.warning("vllm-router did not answer: %s", e)
            return web.Response(status=503, headers={"Retry-After": "1"})

    async def _to_adapter(
        self, request: web.Request, body: bytes, adapter: str
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + self.config.hold_seconds
        tried: set[str] = set()
        held = False
        try:
            while True:
                engine = self.table.choose(adapter, frozenset(tried))
                if engine is None:
                    left = deadline - loop.time()
                    if left <= 0:
                        self.metrics.unavailable.labels(adapter).inc()
                        retry = self.config.retry_after_seconds
                        return unavailable(adapter, loop.time() - start, retry)
                    if not held:
                        held = True
                        self.metrics.held.inc()
                    await self.table.changed(left)
                    tried.clear()  # the marks moved: every engine marked now may be tried
                    continue
                try:
                    # Room is waited for once an engine serves the adapter: a request held for a
                    # load takes none from the base's.
                    response = await self._admitted(
                        partial(self._to_engine, request, body, adapter, engine)
                    )
                except (aiohttp.ClientConnectionError, NotServedError) as e:
                    # Gone, or its mark was withdrawn after this hop read it: another engine, or
                    # hold. Nothing has reached the client yet.
                    log.info("adapter %s: engine %s: %s; trying another", adapter, engine.name, e)
                    tried.add(engine.name)
                    continue
                return response
        finally:
            if held:
                self.metrics.held.dec()

    async def _to_engine(
        self, request: web.Request, body: bytes, adapter: str, engine: Engine
    ) -> web.StreamResponse:
        base = f"http://{engine.ip}:{self.config.engine_port}"
        self.table.started(engine)
        try:
            response = await forward(
                self.session,
                request,
                body,
                base,
                refuse=lambda status, head: lacks_model(status, head, adapter),
            )
        finally:
            self.table.finished(engine)
        self.metrics.routed.labels(adapter).inc()
        return response

    async def serve_metrics(self, request: web.Request) -> web.Response:
        router = await scrape(self.session, self.config.router_metrics_url)
        return web.Response(
            body=self.metrics.text() + router,
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")
