"""Sampling a fleet while it runs: a measurement taken at once, then again every few seconds on a
thread of its own until the `with` block ends. What watches an autoscaled LLMDeployment uses it:
the e2e autoscaling scenario's monitor (the HPA, the status, the pods, Prometheus) and the burst
replay's sampler (bench/burst.py: the GPUs the engines hold)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType


class Sampling:
    """Calls `sample()` on entry and then `seconds` after each call ends (each call costs the API
    server and this process CPU that the engines need on a 2-core machine, so the pause is
    counted from its end), until the block ends. A call that raises (an API hiccup) is said on
    stderr and the next one goes on; one that took longer than `slow` seconds is said too."""

    def __init__(
        self, sample: Callable[[], None], seconds: float, what: str, slow: float | None = None
    ) -> None:
        self.sample, self.seconds, self.what, self.slow = sample, seconds, what, slow
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sampling:
        self._once()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds):
            self._once()

    def _once(self) -> None:
        began = time.monotonic()
        try:
            self.sample()
        except Exception as e:  # the next sample covers it
            print(f"{self.what}: {e!r}", file=sys.stderr)
        took = time.monotonic() - began
        if self.slow is not None and took > self.slow:
            print(f"{self.what}: a sample took {took:.1f}s", file=sys.stderr)
