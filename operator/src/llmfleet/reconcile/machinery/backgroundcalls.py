"""Pod calls too long to make inside a reconcile: a standby engine's `POST /sleep` took 10 s for an
8B and 57 s for a 72B fp8, and a reconcile that waited for it held one of the queue's few workers
(`workqueue.py`) that long. Each call runs on a thread of its own; the reconcile that started it
returns at once, and sees the call as in flight (`snapshot`) until it ends, so it sends no second.

The call's end enqueues its owner's key (`notify_to`): at once when the pod answered 200, after the
pod's own backoff (the queue's `Backoff`: exponential, with jitter) when it did not; the next
reconcile reads the outcome, acts on it (a readiness gate, an Event) and `settle`s it. The threads
never write to the API server, so what they learn is written by a queue worker, through the write
gate. Stopping (`stop`, then `join`; manager.py, before the Lease is released) refuses new calls
and aborts those in flight (podcall.Abort); an outcome that ends after `stop` is dropped, unsaid.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from . import podcall
from .workqueue import Backoff, Key

log = logging.getLogger(__name__)
# (namespace, name, delay in seconds): enqueue the owner
Notify = Callable[[str, str, float], None]
# (url, timeout, headers, abort) -> (status, text): podcall.call's POST, without a body
Caller = Callable[[str, float, Mapping[str, str], podcall.Abort], tuple[int, str]]


@dataclass(frozen=True)
class Request:
    pod: str
    url: str
    path: str
    timeout: float
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Outcome:
    path: str
    error: str | None = None  # None: the pod answered 200


@dataclass(frozen=True)
class Calls:
    """An owner's calls, seen at one instant: a pod is in at most one of the two."""

    in_flight: Mapping[str, str]  # pod -> path
    ended: Mapping[str, Outcome]  # pod -> outcome, not settled yet


class BackgroundCalls:
    """At most one call in flight per pod; calls are keyed by their owner (namespace, name)."""

    def __init__(self, caller: Caller, backoff: Backoff | None = None) -> None:
        self._caller = caller
        self._backoff = Backoff() if backoff is None else backoff  # an empty one is falsy
        self._abort = podcall.Abort()
        self._lock = threading.Lock()
        self._notify: Notify = lambda namespace, name, delay: None
        self._in_flight: dict[Key, dict[str, tuple[str, threading.Thread]]] = {}
        self._ended: dict[Key, dict[str, Outcome]] = {}
        self._called: dict[Key, set[str]] = {}  # pods with a backoff that may need forgetting
        self._stopped = False

    def notify_to(self, notify: Notify) -> None:
        """Where a call's end is told (the kind's queue); until set, nowhere."""
        with self._lock:
            self._notify = notify

    def start(self, key: Key, request: Request) -> bool:
        """POST the request on a thread of its own; False (nothing sent) when its pod has a call
        in flight already or the calls are stopped."""
        pod = request.pod
        with self._lock:
            if self._stopped or pod in self._in_flight.get(key, {}):
                return False
            thread = threading.Thread(
                target=self._run, args=(key, request), name=f"llmfleet-call-{pod}", daemon=True
            )
            self._in_flight.setdefault(key, {})[pod] = (request.path, thread)
            self._called.setdefault(key, set()).add(pod)
            self._ended.get(key, {}).pop(pod, None)
            thread.start()
        return True

    def _run(self, key: Key, request: Request) -> None:
        pod, path = request.pod, request.path
        error: str | None = None
        try:
            status, text = self._caller(
                request.url, request.timeout, dict(request.headers), self._abort
            )
            if status != 200:
                error = f"POST {path} answered {status}: {text[:200]}"
        except podcall.PodCallError as e:
            error = str(e)
        except Exception as e:  # a pod must not stay "in flight" for ever on a bug
            log.exception("call %s to pod %s/%s failed", path, key[0], pod)
            error = f"POST {path} failed: {e}"
        # Before the outcome is seen: a reconcile that reads it must find the pod backing off.
        delay = self._ended_after(key[0], pod, error)
        with self._lock:
            self._in_flight.get(key, {}).pop(pod, None)
            if not self._in_flight.get(key, True):
                del self._in_flight[key]
            if self._stopped:
                return
            self._ended.setdefault(key, {})[pod] = Outcome(path, error)
            notify = self._notify
        notify(key[0], key[1], delay)

    def _ended_after(self, namespace: str, pod: str, error: str | None) -> float:
        if error is None:
            self._backoff.succeeded((namespace, pod))
            return 0.0
        return self._backoff.failed((namespace, pod))

    def snapshot(self, key: Key) -> Calls:
        with self._lock:
            return Calls(
                in_flight={pod: path for pod, (path, _) in self._in_flight.get(key, {}).items()},
                ended=dict(self._ended.get(key, {})),
            )

    def settle(self, key: Key, pod: str) -> None:
        """The outcome of `pod`'s call was acted on."""
        with self._lock:
            self._ended.get(key, {}).pop(pod, None)

    def backing_off(self, namespace: str, pod: str) -> bool:
        """Whether `pod`'s last call failed within its backoff's delay: not called again yet."""
        return self._backoff.waiting((namespace, pod))

    def keep_only(self, key: Key, pods: Iterable[str]) -> None:
        """Forget the outcomes and backoffs of `key`'s pods not in `pods` (gone); a call in
        flight to one of them ends on its own."""
        kept = set(pods)
        with self._lock:
            gone = self._called.get(key, set()) - kept - set(self._in_flight.get(key, {}))
            for pod in gone:
                self._ended.get(key, {}).pop(pod, None)
                self._called[key].discard(pod)
            for table in (self._ended, self._called):
                if not table.get(key, True):
                    del table[key]
        for pod in gone:
            self._backoff.succeeded((key[0], pod))

    def forget(self, key: Key) -> None:
        self.keep_only(key, ())

    def stop(self) -> None:
        """Refuse new calls and abort those in flight; their outcomes are dropped."""
        with self._lock:
            self._stopped = True
        self._abort.abort()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds (after `stop`) for the calls' threads; whether all ended.
        One still connecting ends at its own timeout, and writes nothing either way."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [t for calls in self._in_flight.values() for _, t in calls.values()]
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def __len__(self) -> int:
        """Calls in flight."""
        with self._lock:
            return sum(len(calls) for calls in self._in_flight.values())
