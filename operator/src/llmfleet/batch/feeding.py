"""Keeping the engine fed, and stopping it gracefully.

Up to --max-in-flight requests are queued in the engine at any time (far more than it runs at
once, so continuous batching stays full), refilled as results come back; each record is appended
as its request finishes.

Told to stop (SIGTERM: a preemption, a drain, a deletion), the runner takes no new line, hands
back the lines the engine has not started (recorded as never submitted), lets the engine finish
the lines it runs and writes them, and returns once none is left or its drain time is up, a few
seconds before the pod's grace period ends. What it could not finish runs in the shard's next
pod: a line whose record is written is never run again, so every line is still answered once.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from llmfleet.batch.engine import Engine, RequestRejectedError
from llmfleet.batch.progress import Progress
from llmfleet.batch.records import (
    ENGINE_ERROR,
    LineError,
    Request,
    encode,
    error_record,
    sampling_kwargs,
    success_record,
)
from llmfleet.batch.resume import Attempts

log = logging.getLogger("llmfleet.batch")

PUBLISH_SECONDS = 1.0
# Kept back from the grace period for what follows the drain: closing the output, the summary,
# and vLLM's own shutdown, so the kubelet's SIGKILL finds the runner gone.
STOP_MARGIN_SECONDS = 5.0


class StoppedError(Exception):
    """Told to stop with lines left: what is written stays, the rest runs in the next pod."""


class RecordWriter:
    """Appends whole records: one write() per line, flushed at once, fsynced periodically."""

    def __init__(self, path: Path, fsync_seconds: float) -> None:
        self._f: IO[bytes] = path.open("ab")
        self._fsync_seconds = fsync_seconds
        self._synced = time.monotonic()

    def write(self, record: Mapping[str, Any]) -> None:
        self._f.write(encode(record))
        self._f.flush()
        if time.monotonic() - self._synced >= self._fsync_seconds:
            self.sync()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._synced = time.monotonic()

    def close(self) -> None:
        self.sync()
        self._f.close()


def drain_seconds(grace_seconds: float) -> float:
    """How long a stopping runner lets running lines finish, in a pod given `grace_seconds`."""
    return max(0.0, grace_seconds - STOP_MARGIN_SECONDS)


@dataclass(frozen=True)
class Feed:
    """What one run of the engine works with."""

    engine: Engine
    writer: RecordWriter
    progress: Progress
    attempts: Attempts
    defaults: Mapping[str, Any]
    max_in_flight: int
    drain_seconds: float


def feed(f: Feed, todo: deque[Request], should_stop: Callable[[], bool]) -> None:
    """Answer `todo`; raise StoppedError when told to stop before every line has a record."""
    in_flight: dict[int, Request] = {}  # in submission order
    f.progress.engine_started = time.monotonic()
    published = time.monotonic()
    stop_at: float | None = None
    while todo or in_flight:
        if stop_at is None and should_stop():
            stop_at = time.monotonic() + f.drain_seconds
            todo.extendleft(reversed(_hand_back(f, in_flight)))
        if stop_at is not None:
            if not in_flight or time.monotonic() >= stop_at:
                break
        elif todo and len(in_flight) < f.max_in_flight:
            _submit(f, todo, in_flight)
        if not in_flight:
            continue
        for finished in f.engine.step():
            request = in_flight.pop(finished.line)
            if finished.completion is None:
                f.writer.write(error_record(_engine_error(request, finished.error or "failed")))
                f.progress.errored()
                continue
            f.writer.write(success_record(request, finished.completion, f.engine.model_name))
            f.progress.answered(
                finished.completion.prompt_tokens, finished.completion.completion_tokens
            )
        if time.monotonic() - published >= PUBLISH_SECONDS:
            f.progress.redone = f.attempts.redone
            f.progress.publish()
            published = time.monotonic()
        if in_flight and not f.engine.has_unfinished():
            raise RuntimeError(f"the engine lost {len(in_flight)} requests")
    f.progress.redone = f.attempts.redone
    if stop_at is not None and (todo or in_flight):
        raise StoppedError(
            f"stopped with {len(in_flight)} line(s) running and {len(todo)} not started; "
            "the shard's next pod runs them"
        )


def _submit(f: Feed, todo: deque[Request], in_flight: dict[int, Request]) -> None:
    batch = [todo.popleft() for _ in range(min(len(todo), f.max_in_flight - len(in_flight)))]
    f.attempts.submit(r.line for r in batch)  # durable before the engine sees them
    for request in batch:
        try:
            f.engine.submit(request, sampling_kwargs(request, f.defaults))
        except RequestRejectedError as e:
            f.writer.write(error_record(_engine_error(request, str(e))))
            f.progress.errored()
            continue
        in_flight[request.line] = request


def _hand_back(f: Feed, in_flight: dict[int, Request]) -> list[Request]:
    """The stop: lines the engine has not started leave it at once (returned); those it runs are
    marked stopped, so that not finishing them charges them no attempt."""
    returned = [in_flight.pop(line) for line in f.engine.withdraw(list(in_flight))]
    f.attempts.returned(r.line for r in returned)
    f.attempts.stopped(in_flight)
    log.info(
        "stopping: %d line(s) handed back unstarted, %d running get %.0fs to finish",
        len(returned),
        len(in_flight),
        f.drain_seconds,
    )
    return returned


def _engine_error(request: Request, message: str) -> LineError:
    return LineError(
        request.line, request.custom_id, ENGINE_ERROR, f"line {request.line}: {message}"
    )
