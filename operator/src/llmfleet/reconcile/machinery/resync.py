"""Periodic reconciles, asked for by the operator itself rather than kopf timers: kopf timers need a
finalizer, and a finalizer would block deleting a resource (and its namespace) while the operator
is down. Children are garbage-collected through owner references, so nothing else needs one.

The resync of every LLMDeployment (reverting drift nobody told us about) and the poll of running
LLMBatchJobs' progress (their pods change no object while they work) are both a Resyncer, which
only enqueues: the kind's queue runs the reconciles, and retries them (`loop.py`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


class Resyncer:
    """Every `interval` seconds, on a thread of its own, hands each (namespace, name) that `names`
    returns then to `reconcile` (an enqueue)."""

    def __init__(
        self,
        what: str,
        names: Callable[[], Iterable[tuple[str, str]]],
        reconcile: Callable[[str, str], object],
        interval: float,
    ) -> None:
        self._what = what
        self._names = names
        self._reconcile = reconcile
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"llmfleet-{what}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the reconcile under way (after `stop`); whether the
        loop ended."""
        if self._thread.is_alive():
            self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                names = list(self._names())
            except Exception:  # a failed list must not end the loop
                log.exception("%s: cannot list what to reconcile", self._what)
                continue
            for namespace, name in names:
                if self._stop.is_set():
                    return
                try:
                    self._reconcile(namespace, name)
                except Exception as e:  # one bad resource must not starve the others
                    # Counted by the reconcile itself; only the log line is the loop's.
                    log.warning("%s of %s/%s failed: %s", self._what, namespace, name, e)
