"""One control loop per kind, in controller-runtime's shape: every source of work only enqueues the
resource's key, and the kind's one queue (`workqueue.py`) runs the reconciles: one at a time per
key, requests for a key that waits folded into one, and a failed key again after its backoff.

What enqueues:
- kopf's watch of the kind itself (`main.py`), through `GenerationFilter`: a new object, a new
  `metadata.generation` (a spec change), a deletion; never a status write (the operator's own) or
  other metadata changes, which nothing reconciles on;
- the child informers (`cache.py`): a change to a child enqueues its owner, named by its labels;
- the periodic sources (`resync.py`): the resync of every LLMDeployment and the poll of running
  LLMBatchJobs, which leave alone a key that waits out a failure's backoff;
- the end of a call to a pod too long for a reconcile (`backgroundcalls.py`: a standby engine's
  sleep), at once or after that pod's backoff.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from .base import Reconciler
from .workqueue import Key, WorkQueue

DELETED = "DELETED"


class GenerationFilter:
    """controller-runtime's GenerationChangedPredicate for kopf's raw events: whether an event
    asks for a reconcile. The API server moves `metadata.generation` on every spec change and
    never on a status write; an object seen for the first time (the operator started, or kopf
    relisted), one recreated under the same name (a new uid), one being deleted, and one gone
    all pass too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Per key: uid, generation, and whether deletion had begun, as last heard.
        self._seen: dict[Key, tuple[str, int, bool]] = {}

    def admits(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        meta = body["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if event_type == DELETED:
            with self._lock:
                self._seen.pop(key, None)
            return True
        now = (
            str(meta.get("uid") or ""),
            int(meta.get("generation") or 0),
            bool(meta.get("deletionTimestamp")),
        )
        with self._lock:
            before = self._seen.get(key)
            self._seen[key] = now
        return before != now

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)


class KindLoop:
    """The control loop of one kind: `reconciler`'s queue, and the doors into it."""

    def __init__(self, name: str, reconciler: Reconciler[Any, Any], workers: int) -> None:
        self.reconciler = reconciler
        self.queue = WorkQueue(name, reconciler.work, workers)
        self._filter = GenerationFilter()

    def enqueue(self, namespace: str, name: str, delay: float = 0.0) -> None:
        """Reconcile the resource as soon as a worker is free (a child changed), or `delay`
        seconds from now (a call to a pod failed and backs off)."""
        self.queue.add((namespace, name), delay)

    def enqueue_periodic(self, namespace: str, name: str) -> None:
        """The resync's and the poll's door: a resource waiting out a failure's backoff keeps
        waiting (its retry is queued already), so a failing one is not tried at every period."""
        if not self.reconciler.backoff.waiting((namespace, name)):
            self.enqueue(namespace, name)

    def heard(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """kopf heard an event of the kind (None: listed); enqueue it if the filter admits it.
        Whether it did."""
        if not self._filter.admits(event_type, body):
            return False
        meta = body["metadata"]
        self.enqueue(str(meta["namespace"]), str(meta["name"]))
        return True
