"""The one queue of a kind's reconciles (`loop.py`), whoever asks for them (kopf's events, child
events, the resync, the batch poll, retries), run by a few worker threads (client-go's
rate-limited workqueue, in small): a key is never run by two workers at once, a key asked for
again while it waits runs once, a key asked for while it runs runs once more afterwards, and a
key whose reconcile failed comes back after its own exponential backoff with jitter, so one
failing resource neither spins nor delays the others. Its metrics are client-go's
(metrics_workqueue.py)."""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable

from llmfleet.metrics_workqueue import QueueMetrics

log = logging.getLogger(__name__)
Key = tuple[str, str]  # namespace, name
# Returns the seconds after which the key must be reconciled again (a failure), or None.
Work = Callable[[str, str], float | None]


class Backoff:
    """Per-key exponential backoff: `first` seconds after one failure, doubling up to `cap`, each
    delay drawn between half and all of its value so that resources that failed together do not
    retry together. A Retry-After the server sent is a floor."""

    def __init__(self, first: float = 1.0, cap: float = 300.0) -> None:
        self.first, self.cap = first, cap
        # Per key: failures in a row, the last delay, and when that delay ends (monotonic).
        self._failures: dict[Key, tuple[int, float, float]] = {}
        self._lock = threading.Lock()

    def failed(self, key: Key, retry_after: float | None = None) -> float:
        """Count a failure of `key`; the delay before its next try."""
        with self._lock:
            n = self._failures.get(key, (0, 0.0, 0.0))[0] + 1
            delay: float = min(self.cap, self.first * 2.0 ** (n - 1)) * random.uniform(0.5, 1.0)
            delay = max(delay, retry_after or 0.0)
            self._failures[key] = (n, delay, time.monotonic() + delay)
        return delay

    def failures(self, key: Key) -> int:
        with self._lock:
            return self._failures.get(key, (0, 0.0, 0.0))[0]

    def delay(self, key: Key) -> float:
        """The delay the last failure of `key` was given (0 when it has not failed)."""
        with self._lock:
            return self._failures.get(key, (0, 0.0, 0.0))[1]

    def waiting(self, key: Key) -> bool:
        """Whether `key` is still within the delay of its last failure."""
        with self._lock:
            return self._failures.get(key, (0, 0.0, 0.0))[2] > time.monotonic()

    def succeeded(self, key: Key) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._failures)


class WorkQueue:
    def __init__(self, name: str, work: Work, workers: int = 4) -> None:
        self._name = name
        self._work = work
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Key]] = []
        self._due: dict[Key, float] = {}  # keys waiting, with when they are due
        self._running: dict[Key, float] = {}  # keys being worked on, with when they started
        self._again: dict[Key, float] = {}  # asked for while running: due after it ends
        self._seq = itertools.count()
        self._stopped = False
        self._metrics = QueueMetrics(name, self._depth, self._unfinished, self._longest)
        self._threads = [
            threading.Thread(target=self._worker, name=f"llmfleet-{name}-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the reconciles under way to end (after `stop`);
        whether they all did."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def add(self, key: Key, delay: float = 0.0) -> None:
        """Reconcile `key` in `delay` seconds, or sooner if it is already due sooner."""
        self._put(key, delay, counted=True)

    def _put(self, key: Key, delay: float, *, counted: bool) -> None:
        due = time.monotonic() + delay
        with self._cond:
            if key in self._running:
                if key not in self._again and counted:
                    self._metrics.added()
                self._again[key] = min(due, self._again.get(key, due))
                return
            if key in self._due and self._due[key] <= due:
                return
            if key not in self._due and counted:  # an earlier due time is no new add
                self._metrics.added()
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._due) + len(self._running)

    def _depth(self) -> float:
        """Keys due and not running: waiting for a worker, or for their own run to end. Keys
        still within a retry's delay are not counted, as client-go's delaying queue holds them
        outside the queue until then."""
        now = time.monotonic()
        with self._cond:
            waiting = sum(1 for due in self._due.values() if due <= now)
            return waiting + sum(1 for due in self._again.values() if due <= now)

    def _unfinished(self) -> float:
        now = time.monotonic()
        with self._cond:
            return sum(now - start for start in self._running.values())

    def _longest(self) -> float:
        now = time.monotonic()
        with self._cond:
            return max((now - start for start in self._running.values()), default=0.0)

    def _next(self) -> Key | None:
        with self._cond:
            while not self._stopped:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier add
                if not self._heap:
                    self._cond.wait()
                    continue
                due, _, key = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                del self._due[key]
                started = time.monotonic()
                self._running[key] = started
                self._metrics.started(started - due)
                return key
            return None

    def _worker(self) -> None:
        while (key := self._next()) is not None:
            retry: float | None = None
            try:
                retry = self._work(*key)
            except Exception:  # the work reports its own failures; the worker must live on
                log.exception("%s: reconcile of %s/%s failed", self._name, *key)
            with self._cond:
                started = self._running.pop(key)
                again = self._again.pop(key, None)
            ended = time.monotonic()
            if retry is not None:
                self._metrics.retried()
                self.add(key, retry)
            if again is not None:
                # Counted as an add when it was asked for.
                self._put(key, max(0.0, again - ended), counted=False)
            # Last, so that a run counted as done has had its retry counted too.
            self._metrics.finished(ended - started)
