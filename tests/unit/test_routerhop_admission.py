"""Late binding in the router hop, over HTTP on this machine: a request goes on at once while the
Ready engines have room, waits in the hop (not in an engine's queue) while they have none, and
goes on, oldest first, as soon as a request finishes or an engine becomes Ready; a client that
goes away leaves the queue; one that waits the whole hold gets a 503 it may retry."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hopfakes import BASE, CHUNK_GAP_SECONDS, STREAM_CHUNKS, Lab, lab, pod

from llmfleet.routerhop.admission import Room

A, B = "127.0.0.2", "127.0.0.3"
HELD = "llmfleet_router_hop_requests_held"
IN_FLIGHT = "llmfleet_router_hop_requests_in_flight"
ROOM = "llmfleet_router_hop_room"
STREAM_SECONDS = STREAM_CHUNKS * CHUNK_GAP_SECONDS
# Long enough for the hop to have placed every request sent before it.
SETTLE = 0.3

ROOMS = {
    # case: (slots per engine, queue per engine, routers, Ready engines) -> room of one router
    "one-engine-one-router": (13, 5, 1, 1, 18),
    "three-engines-two-routers-share-evenly": (13, 5, 2, 3, 27),
    "an-uneven-share-rounds-up": (4, 0, 3, 1, 2),
    "no-queue-of-their-own": (8, 0, 1, 4, 32),
    "no-engine-ready-no-room": (13, 5, 1, 0, 0),
}


@pytest.mark.parametrize(("slots", "queue", "routers", "ready", "room"), ROOMS.values(), ids=ROOMS)
def test_room_is_the_ready_engines_sequences_and_queues_shared_by_the_routers(
    slots: int, queue: int, routers: int, ready: int, room: int
) -> None:
    assert Room(slots, queue, routers).of(ready) == room


BAD_ROOMS = {
    "no-slots": ((0, 0, 1), "slots_per_engine"),
    "no-routers": ((1, 0, 0), "routers"),
    "negative-queue": ((1, -1, 1), "queue_per_engine"),
}


@pytest.mark.parametrize(("args", "field"), BAD_ROOMS.values(), ids=BAD_ROOMS)
def test_a_room_that_could_admit_nothing_is_refused_by_name(
    args: tuple[int, int, int], field: str
) -> None:
    with pytest.raises(ValueError, match=field):
        Room(*args)


def sample(hop: Lab, name: str) -> float | None:
    return hop.hop.metrics.registry.get_sample_value(name)


@asynccontextmanager
async def streaming_lab(
    room: Room, admit_seconds: float = 10.0, engines: dict[str, set[str]] | None = None
) -> AsyncIterator[Lab]:
    """The hop with `room`, and vllm-router's place taken by engine A, which streams each answer
    over STREAM_SECONDS: a request stays in flight that long."""
    async with lab(engines or {A: set()}, room=room, admit_seconds=admit_seconds) as hop:
        router = f"http://{A}:{hop.engine_port}"
        hop.hop.config = dataclasses.replace(hop.hop.config, router_url=router)
        yield hop


async def stream(hop: Lab, who: str) -> tuple[int, float]:
    """One base-model request named `who` (its Authorization header, which the engine logs):
    its status and when its last byte came (monotonic)."""
    body = {"model": BASE, "stream": True}
    headers = {"Authorization": f"Bearer {who}"}
    async with hop.session.post(f"{hop.hop_url}/v1/completions", json=body, headers=headers) as r:
        await r.read()
        return r.status, time.monotonic()


def reached_engine(hop: Lab) -> list[str]:
    return [str(auth).removeprefix("Bearer ") for _, _, auth in hop.log.calls]


def test_requests_beyond_the_room_wait_in_the_hop_and_go_out_oldest_first() -> None:
    async def run() -> None:
        async with streaming_lab(Room(slots_per_engine=2, queue_per_engine=0, routers=1)) as hop:
            names = [f"r{i}" for i in range(5)]
            tasks = []
            for name in names:
                tasks.append(asyncio.create_task(stream(hop, name)))
                await asyncio.sleep(0.02)  # arrival order
            await asyncio.sleep(SETTLE)
            assert reached_engine(hop) == names[:2]
            assert (sample(hop, HELD), sample(hop, IN_FLIGHT)) == (3, 2)
            results = await asyncio.gather(*tasks)
            assert {status for status, _ in results} == {200}
            # Each finished request let the oldest held one go: three waves of at most two.
            assert reached_engine(hop) == names
            assert (sample(hop, HELD), sample(hop, IN_FLIGHT)) == (0, 0)

    asyncio.run(run())


def test_a_request_is_never_held_while_there_is_room() -> None:
    async def run() -> None:
        async with streaming_lab(Room(slots_per_engine=4, queue_per_engine=1, routers=1)) as hop:
            sent = time.monotonic()
            results = await asyncio.gather(*(stream(hop, f"r{i}") for i in range(5)))
            # All five at once: one stream's time, not two.
            assert max(done for _, done in results) - sent < 2 * STREAM_SECONDS - 0.1
            assert sample(hop, HELD) == 0

    asyncio.run(run())


def test_an_engine_becoming_ready_lets_held_requests_go_at_once() -> None:
    async def run() -> None:
        room = Room(slots_per_engine=1, queue_per_engine=0, routers=1)
        async with streaming_lab(room, engines={A: set(), B: set()}) as hop:
            hop.table.apply("MODIFIED", pod("engine-1", B, [], ready=False))
            assert sample(hop, ROOM) == 1
            tasks = [asyncio.create_task(stream(hop, f"r{i}")) for i in range(3)]
            await asyncio.sleep(SETTLE)
            assert (len(reached_engine(hop)), sample(hop, HELD)) == (1, 2)
            hop.table.apply("MODIFIED", pod("engine-1", B, [], ready=True))
            await asyncio.sleep(0.1)  # far less than a stream: it did not wait for one to end
            assert (len(reached_engine(hop)), sample(hop, HELD)) == (2, 1)
            assert sample(hop, ROOM) == 2
            assert {status for status, _ in await asyncio.gather(*tasks)} == {200}

    asyncio.run(run())


def test_a_held_request_whose_client_went_away_leaves_the_queue_and_is_never_sent() -> None:
    async def run() -> None:
        async with streaming_lab(Room(slots_per_engine=1, queue_per_engine=0, routers=1)) as hop:
            first = asyncio.create_task(stream(hop, "first"))
            await asyncio.sleep(0.05)
            gone = asyncio.create_task(stream(hop, "gone"))
            await asyncio.sleep(0.05)
            after = asyncio.create_task(stream(hop, "after"))
            await asyncio.sleep(SETTLE)
            assert sample(hop, HELD) == 2
            gone.cancel()  # the client closes its connection
            await asyncio.sleep(SETTLE)
            assert sample(hop, HELD) == 1
            assert [s for s, _ in await asyncio.gather(first, after)] == [200, 200]
            assert reached_engine(hop) == ["first", "after"]
            assert sample(hop, IN_FLIGHT) == 0

    asyncio.run(run())


def test_a_request_that_found_no_room_within_the_hold_gets_a_503_to_retry() -> None:
    async def run() -> None:
        room = Room(slots_per_engine=4, queue_per_engine=1, routers=1)
        async with streaming_lab(room, admit_seconds=0.4) as hop:
            hop.table.replace([])  # no engine Ready
            sent = time.monotonic()
            async with hop.session.post(
                f"{hop.hop_url}/v1/completions", json={"model": BASE, "prompt": "hi"}
            ) as resp:
                status, headers, doc = resp.status, resp.headers, await resp.json()
            assert status == 503
            assert 0.4 <= time.monotonic() - sent < 2
            assert int(headers["Retry-After"]) > 0
            assert doc["error"]["type"] == "ServiceUnavailableError"
            assert "0 engines Ready" in doc["error"]["message"]
            assert hop.log.calls == []
            assert sample(hop, "llmfleet_router_hop_no_room_requests_total") == 1
            assert (sample(hop, HELD), sample(hop, IN_FLIGHT)) == (0, 0)

    asyncio.run(run())


@pytest.mark.parametrize(("method", "path"), [("GET", "/health"), ("GET", "/v1/models")])
def test_requests_that_run_on_no_engine_never_wait_for_room(method: str, path: str) -> None:
    async def run() -> None:
        async with lab({A: set()}, admit_seconds=5) as hop:
            hop.table.replace([])  # no engine Ready: every generation would wait
            sent = time.monotonic()
            async with hop.session.request(method, f"{hop.hop_url}{path}") as resp:
                assert resp.status == 200
            assert time.monotonic() - sent < 1
            assert [who for who, _, _ in hop.log.calls] == ["router"]

    asyncio.run(run())


def test_adapter_and_base_requests_share_the_room() -> None:
    async def run() -> None:
        room = Room(slots_per_engine=1, queue_per_engine=0, routers=1)
        async with streaming_lab(room, engines={A: {"sql"}}) as hop:
            body = {"model": "sql", "stream": True}
            adapter = asyncio.create_task(
                hop.session.post(f"{hop.hop_url}/v1/completions", json=body)
            )
            await asyncio.sleep(0.05)
            base = asyncio.create_task(stream(hop, "base"))
            await asyncio.sleep(SETTLE)
            assert sample(hop, HELD) == 1  # the base request waits for the adapter's to end
            resp = await adapter
            await resp.read()
            resp.release()
            assert (await base)[0] == 200
            assert [model for _, model, _ in hop.log.calls] == ["sql", BASE]

    asyncio.run(run())
