"""The one door every write to the API server goes through, so that only the Lease's holder writes:
by construction, not by each writer remembering to look.

The gate holds a deadline on the monotonic clock. The leader moves it on with every renewal to
`renew_deadline` after the renewal began; a write that would start later is refused
(`NotLeadingError`), however long the renewal in flight hangs. A write that starts in time is
given a timeout of at most `call_timeout`, so it has ended (on this side) before another replica
may take the Lease: `renew_deadline + call_timeout < lease_duration` (`leader.py`). Shutting down
closes the gate and waits for the writes in flight, before the Lease is handed over.

`GatedApiClient` is the Kubernetes client the writers share; reads and watches pass untouched.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NotLeadingError(Exception):
    """A write refused: this replica does not (or may no longer) hold the leader Lease."""


class WriteGate:
    """Open until `deadline` (monotonic seconds); `math.inf` for a replica without election."""

    def __init__(
        self,
        deadline: float = 0.0,
        call_timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._deadline = deadline
        self._closed = False
        self.call_timeout = call_timeout
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = 0

    @classmethod
    def always_open(cls) -> WriteGate:
        """The gate of the only replica (no leader election): open until closed."""
        return cls(math.inf)

    def open_until(self, deadline: float) -> None:
        """A renewal succeeded: writes may start until `deadline` (never moves back)."""
        with self._cond:
            if not self._closed:
                self._deadline = max(self._deadline, deadline)

    def close(self) -> None:
        """Refuse every write from now on (shutdown, or the Lease lost)."""
        with self._cond:
            self._closed = True
            self._deadline = -math.inf

    def is_open(self) -> bool:
        with self._cond:
            return self._clock() < self._deadline

    def enter(self, what: str) -> float | None:
        """Admit one write (pair with `leave`); its timeout in seconds, None for no bound."""
        with self._cond:
            if not self._clock() < self._deadline:
                raise NotLeadingError(
                    f"{what} refused: this replica does not hold the leader Lease"
                )
            self._in_flight += 1
            return self.call_timeout

    def leave(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the admitted writes to end; whether they all did."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._in_flight:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight


class GatedApiClient(k8s.ApiClient):  # type: ignore[misc]  # kubernetes has no types
    """A Kubernetes client whose writes pass `gate`: refused once it is shut, and bounded by its
    call timeout (the smaller of that and any timeout the caller asked for)."""

    def __init__(self, configuration: k8s.Configuration, gate: WriteGate) -> None:
        super().__init__(configuration)
        self.gate = gate

    def request(  # type: ignore[no-untyped-def]
        self, method, url, *args: Any, _request_timeout: Any = None, **kwargs: Any
    ):
        if method not in WRITE_METHODS:
            return super().request(method, url, *args, _request_timeout=_request_timeout, **kwargs)
        bound = self.gate.enter(f"{method} {url.split('?')[0]}")
        try:
            if bound is not None and not (
                isinstance(_request_timeout, (int, float)) and _request_timeout <= bound
            ):
                _request_timeout = bound
            return super().request(method, url, *args, _request_timeout=_request_timeout, **kwargs)
        finally:
            self.gate.leave()
