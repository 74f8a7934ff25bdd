"""The router hop between clients and the engines, end to end over HTTP on this machine: a request
for an adapter reaches only an engine that serves it (never vLLM's 404 from one that lacks it),
waits while none does and then gets a 503 naming it; an unknown model gets vLLM's 404 at once;
the base model and everything else reach vllm-router unchanged, streams chunk by chunk."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest
from hopfakes import BASE, CHUNK_GAP_SECONDS, ROUTER_METRICS, STREAM_CHUNKS, lab, pod

A, B = "127.0.0.2", "127.0.0.3"
REQUESTS = 20


async def post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, dict[str, Any], Any]:
    async with session.post(f"{url}/v1/completions", json=body, headers=headers) as resp:
        return resp.status, dict(resp.headers), await resp.json(content_type=None)


ROUTES: dict[str, tuple[dict[str, set[str]], dict[str, Any], int, set[str]]] = {
    # case: (engines by IP -> adapters they serve, body, status, who answered)
    "adapter-on-one-engine-only": ({A: {"sql"}, B: set()}, {"model": "sql"}, 200, {"engine-0"}),
    "adapter-on-both": ({A: {"sql"}, B: {"sql"}}, {"model": "sql"}, 200, {"engine-0", "engine-1"}),
    "other-adapter-other-engine": ({A: {"sql"}, B: {"chat"}}, {"model": "chat"}, 200, {"engine-1"}),
    "base-model-to-the-router": ({A: {"sql"}, B: set()}, {"model": BASE}, 200, {"router"}),
    "no-model-to-the-router": ({A: {"sql"}}, {"prompt": "hi"}, 200, {"router"}),
    "unknown-model-404-at-once": ({A: {"sql"}}, {"model": "gpt-9"}, 404, set()),
    # Added to spec.adapters after this router pod started: marked on an engine, so served.
    "marked-adapter-this-pod-does-not-list-yet": (
        {A: {"new"}},
        {"model": "new"},
        200,
        {"engine-0"},
    ),
    "adapter-loaded-nowhere-503": ({A: set(), B: set()}, {"model": "sql"}, 503, set()),
}


@pytest.mark.parametrize(
    ("engines", "body", "status", "answered"), ROUTES.values(), ids=ROUTES.keys()
)
def test_each_request_reaches_what_can_serve_it(
    engines: dict[str, set[str]], body: dict[str, Any], status: int, answered: set[str]
) -> None:
    async def run() -> None:
        async with lab(engines, hold_seconds=0.1) as hop:
            results = [await post(hop.session, hop.hop_url, body) for _ in range(REQUESTS)]
            assert {code for code, _, _ in results} == {status}
            assert {name for name, _, _ in hop.log.calls} == answered
            if status == 404:
                (error,) = {json.dumps(doc) for _, _, doc in results}
                assert json.loads(error)["error"]["type"] == "NotFoundError"
                assert "`gpt-9` does not exist" in json.loads(error)["error"]["message"]
            if status == 503:
                _, headers, doc = results[0]
                assert int(headers["Retry-After"]) > 0
                assert "`sql`" in doc["error"]["message"]
                assert doc["error"]["code"] == 503

    asyncio.run(run())


def test_without_adapters_an_unknown_model_is_the_engines_to_refuse() -> None:
    """The hop of an LLMDeployment without adapters reads no name: vllm-router gets every model
    (the engine answers one it does not serve with its own 404, as before the hop was there)."""

    async def run() -> None:
        async with lab({A: set()}) as hop:
            hop.hop.config = dataclasses.replace(hop.hop.config, adapters=frozenset())
            status, _, doc = await post(hop.session, hop.hop_url, {"model": "/models/tiny"})
            assert (status, doc["served_by"], doc["model"]) == (200, "router", "/models/tiny")
            unknown = "llmfleet_router_hop_unknown_model_requests_total"
            assert hop.hop.metrics.registry.get_sample_value(unknown) == 0

    asyncio.run(run())


def test_a_request_held_for_an_adapter_goes_out_when_an_engine_is_marked() -> None:
    async def run() -> None:
        engines: dict[str, set[str]] = {A: set(), B: set()}
        async with lab(engines, hold_seconds=5) as hop:
            sent = time.monotonic()
            pending = asyncio.create_task(post(hop.session, hop.hop_url, {"model": "sql"}))
            await asyncio.sleep(0.3)
            assert not pending.done()
            assert (
                hop.hop.metrics.registry.get_sample_value("llmfleet_router_hop_requests_held") == 1
            )
            # The engine at B loads it; the operator marks its pod.
            engines[B].add("sql")
            hop.table.apply("MODIFIED", pod("engine-1", B, ["sql"]))
            (status, _, doc) = await pending
            assert status == 200
            assert doc["served_by"] == "engine-1"
            assert 0.3 <= time.monotonic() - sent < 2
            assert (
                hop.hop.metrics.registry.get_sample_value("llmfleet_router_hop_requests_held") == 0
            )

    asyncio.run(run())


def test_a_held_request_whose_client_went_away_stops_waiting_and_is_never_sent() -> None:
    async def run() -> None:
        engines: dict[str, set[str]] = {A: set()}
        async with lab(engines, hold_seconds=5) as hop:
            held = "llmfleet_router_hop_requests_held"
            gone = asyncio.create_task(post(hop.session, hop.hop_url, {"model": "sql"}))
            await asyncio.sleep(0.3)
            assert hop.hop.metrics.registry.get_sample_value(held) == 1
            gone.cancel()  # the client closes its connection
            await asyncio.sleep(0.3)
            assert hop.hop.metrics.registry.get_sample_value(held) == 0
            engines[A].add("sql")
            hop.table.apply("MODIFIED", pod("engine-0", A, ["sql"]))
            await asyncio.sleep(0.3)
            assert hop.log.calls == []  # no engine got it

    asyncio.run(run())


def test_an_engine_whose_mark_is_stale_never_answers_404() -> None:
    """The mark names sql on both, but engine A lost it (its withdrawal not seen yet): its 404 is
    not passed on; the request goes to B."""

    async def run() -> None:
        async with lab({A: set(), B: {"sql"}}, hold_seconds=2) as hop:
            hop.table.replace([pod("engine-0", A, ["sql"]), pod("engine-1", B, ["sql"])])
            results = [
                await post(hop.session, hop.hop_url, {"model": "sql"}) for _ in range(REQUESTS)
            ]
            assert Counter(code for code, _, _ in results) == {200: REQUESTS}
            assert {doc["served_by"] for _, _, doc in results} == {"engine-1"}

    asyncio.run(run())


def test_an_engine_that_refuses_connections_is_passed_over() -> None:
    async def run() -> None:
        async with lab({A: {"sql"}}, hold_seconds=2) as hop:
            gone = pod("engine-9", "127.0.0.9", ["sql"])  # marked, nothing listens there
            hop.table.apply("ADDED", gone)
            results = [
                await post(hop.session, hop.hop_url, {"model": "sql"}) for _ in range(REQUESTS)
            ]
            assert {(code, doc["served_by"]) for code, _, doc in results} == {(200, "engine-0")}

    asyncio.run(run())


def test_the_router_sees_the_request_and_the_client_the_answer_unchanged() -> None:
    async def run() -> None:
        async with lab({A: {"sql"}}) as hop:
            url = f"{hop.hop_url}/v1/completions?trace=1"
            body = {"model": BASE, "prompt": "hi"}
            headers = {"Authorization": "Bearer k1"}
            async with hop.session.post(url, json=body, headers=headers) as resp:
                assert resp.status == 200
                assert resp.headers["X-Router"] == "yes"
                doc = await resp.json()
            assert doc["path"] == "/v1/completions?trace=1"
            bad = {"Authorization": "Bearer wrong"}
            status, _, _ = await post(hop.session, hop.hop_url, body, **bad)
            assert status == 401  # the router's status, passed on
            sql = {"Authorization": "Bearer k2"}
            status, _, _ = await post(hop.session, hop.hop_url, {"model": "sql"}, **sql)
            async with hop.session.get(f"{hop.hop_url}/health") as resp:
                assert resp.status == 200
                assert await resp.text() == "ok"
            assert [(who, auth) for who, _, auth in hop.log.calls] == [
                ("router", "Bearer k1"),
                ("router", "Bearer wrong"),
                ("engine-0", "Bearer k2"),
                ("router", None),
            ]

    asyncio.run(run())


@pytest.mark.parametrize("model", ["sql", BASE], ids=["adapter-from-its-engine", "base-via-router"])
def test_a_stream_arrives_chunk_by_chunk(model: str) -> None:
    """Each SSE event reaches the client when the engine sends it, not when the stream ends."""

    async def run() -> None:
        async with lab({A: {"sql"}}) as hop:
            if model == BASE:  # the fake router does not stream: send the base to the engine
                router = f"http://{A}:{hop.engine_port}"
                hop.hop.config = dataclasses.replace(hop.hop.config, router_url=router)
            started = time.monotonic()
            arrivals: list[float] = []
            body = {"model": model, "stream": True}
            async with hop.session.post(f"{hop.hop_url}/v1/completions", json=body) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        arrivals.append(time.monotonic() - started)
            assert len(arrivals) == STREAM_CHUNKS
            # The first event came long before the last was sent, and each a gap after the other.
            assert arrivals[0] < CHUNK_GAP_SECONDS * (STREAM_CHUNKS - 2)
            gaps = [b - a for a, b in itertools.pairwise(arrivals)]
            assert min(gaps) > CHUNK_GAP_SECONDS / 2

    asyncio.run(run())


def test_metrics_count_routed_held_and_refused_and_carry_the_routers() -> None:
    async def run() -> None:
        async with lab({A: {"sql"}, B: set()}, hold_seconds=0.2) as hop:
            for _ in range(3):
                await post(hop.session, hop.hop_url, {"model": "sql"})
            await post(hop.session, hop.hop_url, {"model": "chat"})  # loaded nowhere: 503
            await post(hop.session, hop.hop_url, {"model": "gpt-9"})  # unknown: 404
            async with hop.session.get(f"{hop.metrics_url}/metrics") as resp:
                text = await resp.text()
            samples = {
                line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line and not line.startswith("#")
            }
            assert samples['llmfleet_router_hop_routed_requests_total{adapter="sql"}'] == 3
            assert samples['llmfleet_router_hop_unavailable_requests_total{adapter="chat"}'] == 1
            assert samples["llmfleet_router_hop_unknown_model_requests_total"] == 1
            assert samples["llmfleet_router_hop_requests_held"] == 0
            assert ROUTER_METRICS.decode() in text  # vllm-router's own, on the same scrape

    asyncio.run(run())
