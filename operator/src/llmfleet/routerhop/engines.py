"""The engine pods the hop may send requests to, as its pod watch last saw them: how many are Ready
(the fleet's room: admission.py), and the choice among them for an adapter's request: a Ready pod
whose mark names the adapter, the one with the fewest requests in flight from this hop (ties
broken at random)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The pod condition the operator writes on each LoRA engine pod (render.names.ADAPTERS_MARK;
# tests/unit/test_routerhop_engines.py holds the two equal): its message lists the adapters the
# engine serves, comma-separated.
ADAPTERS_MARK = "llmfleet.dev/adapters-serving"


@dataclass(frozen=True)
class Engine:
    name: str
    ip: str
    adapters: frozenset[str]


def engine_of(pod: Mapping[str, Any]) -> Engine | None:
    """The pod as a target for adapter requests, or None while it may not get one: not Running
    and Ready, no IP yet, or being deleted (it drains: vllm-router stops sending to it too)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    ip = status.get("podIP")
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ip or not ready:
        return None
    adapters: frozenset[str] = frozenset()
    for c in conditions:
        if c.get("type") == ADAPTERS_MARK and c.get("status") == "True":
            adapters = frozenset(n for n in str(c.get("message") or "").split(",") if n)
    return Engine(str(meta.get("name")), str(ip), adapters)


class EngineTable:
    """Pod name -> Engine, and the requests this hop has in flight to each. Waiters are woken on
    every change, so a held request goes out as soon as a pod is marked with its adapter."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._engines: dict[str, Engine] = {}
        self._in_flight: dict[str, int] = {}
        self._rng = rng or random.Random()
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, listener: Callable[[], None]) -> None:
        """`listener()` runs after every change of the set."""
        self._listeners.append(listener)

    def ready_count(self) -> int:
        return len(self._engines)

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """The whole set, from a list."""
        self._engines = {}
        for pod in pods:
            self._put(pod)
        self._wake()

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """One watch event."""
        if event_type == "DELETED":
            self._engines.pop(str((pod.get("metadata") or {}).get("name")), None)
        else:
            self._put(pod)
        self._wake()

    def _put(self, pod: Mapping[str, Any]) -> None:
        name = str((pod.get("metadata") or {}).get("name"))
        engine = engine_of(pod)
        if engine is None:
            self._engines.pop(name, None)
        else:
            self._engines[name] = engine

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        for listener in self._listeners:
            listener()

    def serving(self, adapter: str) -> list[Engine]:
        return [e for e in self._engines.values() if adapter in e.adapters]

    def choose(self, adapter: str, exclude: frozenset[str] = frozenset()) -> Engine | None:
        """A Ready engine marked with `adapter`, the least busy (from this hop), or None."""
        candidates = [e for e in self.serving(adapter) if e.name not in exclude]
        if not candidates:
            return None
        fewest = min(self._in_flight.get(e.name, 0) for e in candidates)
        return self._rng.choice([e for e in candidates if self._in_flight.get(e.name, 0) == fewest])

    def started(self, engine: Engine) -> None:
        self._in_flight[engine.name] = self._in_flight.get(engine.name, 0) + 1

    def finished(self, engine: Engine) -> None:
        left = self._in_flight.get(engine.name, 0) - 1
        if left > 0:
            self._in_flight[engine.name] = left
        else:
            self._in_flight.pop(engine.name, None)

    async def changed(self, timeout: float) -> None:
        """Returns at the next change, or after `timeout` seconds."""
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
