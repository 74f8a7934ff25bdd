"""Late binding: a request waits in the hop, not in one engine's queue, until the fleet has room
for it. vllm-router binds a request to an engine the moment it arrives, so in a burst thousands
pile into the queues of the engines that exist, and engines that become Ready later get none of
that backlog. The hop passes a request on only while its requests in flight are below the
fleet's room, and holds the rest in arrival order until room appears: an engine becomes Ready,
or a request finishes.

Room, per router pod: (Ready engines) x (sequences an engine runs at once + a short queue of its
own) / (router pods), rounded up. The Service spreads connections evenly over the router pods,
so each holds its share; the engines' own short queue keeps vLLM's batch full between a request
finishing and the next arriving. Nothing is grouped or delayed while there is room: vLLM's
continuous batching does all the batching."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass

from .engines import EngineTable
from .metrics import HopMetrics


@dataclass(frozen=True)
class Room:
    slots_per_engine: int  # the plan's max concurrent sequences per engine
    queue_per_engine: int  # what each engine may queue on its own beyond its slots
    routers: int  # router pods sharing the engines

    def __post_init__(self) -> None:
        for name in ("slots_per_engine", "routers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.queue_per_engine < 0:
            raise ValueError(f"queue_per_engine must be 0 or more, not {self.queue_per_engine}")

    def of(self, ready_engines: int) -> int:
        """Requests this router pod may have in flight with `ready_engines` Ready."""
        per_engine = self.slots_per_engine + self.queue_per_engine
        return math.ceil(ready_engines * per_engine / self.routers)


class Admission:
    """The hop's requests in flight (admitted, not yet finished) and the ones held, FIFO."""

    def __init__(self, room: Room, table: EngineTable, metrics: HopMetrics) -> None:
        self.room, self.table, self.metrics = room, table, metrics
        self.in_flight = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        table.subscribe(self._admit_waiting)
        self._show()

    def capacity(self) -> int:
        return self.room.of(self.table.ready_count())

    async def enter(self, timeout: float) -> bool:
        """True once the request may go on (the caller then owes one leave()); False when no room
        came within `timeout` seconds. A cancelled caller (its client went away) leaves the queue
        and is never admitted."""
        if not self._waiting and self.in_flight < self.capacity():
            self.in_flight += 1
            self._show()
            return True
        admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(admitted)
        self.metrics.held.inc()
        try:
            await asyncio.wait_for(admitted, timeout)
            return True
        except TimeoutError:
            # Room may have come in the same turn of the loop as the timeout.
            return admitted.done() and not admitted.cancelled()
        except asyncio.CancelledError:
            if admitted.done() and not admitted.cancelled():
                self.leave()  # room was given to it just as its client went away: give it back
            raise
        finally:
            self.metrics.held.dec()

    def leave(self) -> None:
        self.in_flight -= 1
        self._admit_waiting()

    def _admit_waiting(self) -> None:
        """Admit held requests, oldest first, while there is room (a waiter that timed out or
        was cancelled is skipped)."""
        capacity = self.capacity()
        while self._waiting and self.in_flight < capacity:
            admitted = self._waiting.popleft()
            if admitted.done():
                continue
            admitted.set_result(None)
            self.in_flight += 1
        self._show()

    def _show(self) -> None:
        self.metrics.in_flight.set(self.in_flight)
        self.metrics.room.set(self.capacity())
