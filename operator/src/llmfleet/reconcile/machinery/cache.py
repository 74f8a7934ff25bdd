"""The operator's view of what it manages: every object labelled managed-by=llmfleet, of each kind
a reconcile reads, kept in memory by one list-then-watch per kind. A reconcile reads its children
here instead of GETting each and LISTing every kind it renders (render.fleet.MANAGED_KINDS) to
prune, and every change to a child queues its owner's reconcile (the owner is in the child's
labels: no GET to find it).

Why a cache of our own rather than kopf indices: reconciles run on the kinds' queues' workers
(`loop.py`), never in kopf's handlers, and kopf hands its indices only to handlers, as keyword
arguments. And kopf keeps a worker and per-object memory for every object
it watches; for children, which the operator only reads, a plain watch costs less.

Consistency, as with controller-runtime's informers: the view may lag the API server by the
events in flight. That is safe here because a reconcile is level-based and its writes are
idempotent: an apply made on a stale view changes nothing on the server (server-side apply of the
same fields), a delete of what is already gone is a 404 that is ignored, and the event that the
view has not seen yet queues the owner again, so the next reconcile reads the truth. What a view
never does is answer before its first list: `wait_synced` holds reconciles until every kind has
been listed, so an operator that just started never takes existing children for missing.

A kind the API server does not serve (LeaderWorkerSet, which only multi-node layouts need) is
not an error: its informer counts as listed and empty, looks the kind up again every
ABSENT_RECHECK_SECONDS, and forgets what it held if the kind goes away (its CRD deleted);
`serves` tells the reconcile, which then reports the missing API in status.

Each object is kept as its compact JSON without `managedFields` (the bulk of a live object, and
read by nobody here): a few KiB instead of the tens a parsed dict takes, and every reader gets a
copy of its own that no other thread can change under it.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from llmfleet.render.batchjob import BATCH_KINDS, BATCHJOB_LABEL
from llmfleet.render.fleet import MANAGED_KINDS
from llmfleet.render.names import DEPLOYMENT_LABEL, MANAGED_BY

log = logging.getLogger(__name__)
Key = tuple[str, str]  # namespace, name
Kind = tuple[str, str]  # apiVersion, kind
OnChange = Callable[[dict[str, Any]], None]
WATCH_SECONDS = 300  # a watch the server ends after this long is resumed from where it stood
RETRY_MIN, RETRY_MAX = 0.5, 30.0  # after a failed list or watch (API server restarting)
# How often a kind the API server does not serve (LeaderWorkerSet before it is installed) is
# looked up again.
ABSENT_RECHECK_SECONDS = 15.0


def _compact(kind: Kind, obj: dict[str, Any]) -> bytes:
    """`obj` as stored: with its apiVersion and kind (list items lack them), without
    managedFields."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    whole = {**obj, "apiVersion": kind[0], "kind": kind[1], "metadata": meta}
    return json.dumps(whole, separators=(",", ":")).encode()


class Informer:
    """One kind's objects matching `selector`, in `namespace` (every namespace when None), kept
    current by a watch. `index_labels` are the label keys objects can be looked up by (an
    owner's name)."""

    def __init__(
        self,
        dyn: DynamicClient,
        kind: Kind,
        namespace: str | None,
        *,
        selector: str,
        index_labels: Iterable[str],
        on_change: OnChange,
    ) -> None:
        self.kind = kind
        self._namespace = namespace
        self._dyn = dyn
        self._resource: Any = None  # looked up by the watch thread: the API may come and go
        # Whether the API server serves this kind (None: not looked up yet).
        self.served: bool | None = None
        self._selector = selector
        self._index_labels = tuple(index_labels)
        self._on_change = on_change
        self._lock = threading.Lock()
        self._objects: dict[Key, bytes] = {}
        # (label key, namespace, label value) -> names of the objects carrying it.
        self._index: dict[tuple[str, str, str], set[str]] = {}
        self._labels: dict[Key, dict[str, str]] = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._watcher: k8s_watch.Watch | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"llmfleet-watch-{kind[1]}", daemon=True
        )

    # --- reads ---------------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            raw = self._objects.get((namespace, name))
        return None if raw is None else dict(json.loads(raw))

    def by_label(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        """The objects in `namespace` labelled `label=value` (`label` one of `index_labels`),
        sorted by name."""
        with self._lock:
            names = sorted(self._index.get((label, namespace, value), ()))
            raws = [self._objects[(namespace, n)] for n in names]
        return [json.loads(r) for r in raws]

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    # --- the watch -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        version: str | None = None
        failures = 0
        while not self._stop.is_set():
            try:
                if self._resource is None and not self._look_up():
                    self._stop.wait(ABSENT_RECHECK_SECONDS)
                    continue
                if version is None:
                    version = self._relist()
                    self.synced.set()
                version = self._watch(version)
                failures = 0
            except ApiException as e:
                if e.status == 410:  # our resourceVersion is older than the server keeps
                    version = None
                    continue
                if e.status == 404:  # the kind is no longer served (its CRD was deleted)
                    self._gone()
                    version = None
                    continue
                failures += 1
                self._pause(failures, f"API {e.status} {e.reason}")
            except Exception as e:  # connection refused or reset: the API server is restarting
                failures += 1
                self._pause(failures, repr(e))

    def _look_up(self) -> bool:
        """Whether the API server serves the kind now; while it does not, the view holds none
        of it and counts as listed."""
        try:
            self._resource = self._dyn.resources.get(api_version=self.kind[0], kind=self.kind[1])
        except ResourceNotFoundError:
            if self.served is not False:
                log.info(
                    "%s (%s) is not served; looking again every %.0fs",
                    self.kind[1],
                    self.kind[0],
                    ABSENT_RECHECK_SECONDS,
                )
            self.served = False
            self.synced.set()
            return False
        self.served = True
        return True

    def _gone(self) -> None:
        """The kind stopped being served: forget its objects, as the API server has."""
        log.info("%s (%s) is no longer served", self.kind[1], self.kind[0])
        with self._lock:
            held = list(self._objects.items())
        for key, raw in held:
            self._forget(key)
            self._notify(json.loads(raw))
        self._resource = None
        self.served = False
        self._dyn.resources.invalidate_cache()

    def _pause(self, failures: int, why: str) -> None:
        if self._stop.is_set():
            return  # stopped: the watch ended because its connection did
        delay = min(RETRY_MAX, RETRY_MIN * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
        log.warning("watch of %s failed (%s); again in %.1fs", self.kind[1], why, delay)
        self._stop.wait(delay)

    def _relist(self) -> str:
        """Replace the view with a fresh list; report what changed since the last one (nothing
        on the first: kopf's first listing of the owners enqueues every one)."""
        response = self._resource.get(
            namespace=self._namespace, label_selector=self._selector, serialize=False
        )
        listed = json.loads(response.data)
        fresh = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in listed["items"]}
        first = not self.synced.is_set()
        with self._lock:
            old = dict(self._objects)
        changed: list[dict[str, Any]] = []
        for key in old.keys() - fresh.keys():
            gone = json.loads(old[key])
            self._forget(key)
            changed.append(gone)
        for key, obj in fresh.items():
            raw = _compact(self.kind, obj)
            if old.get(key) != raw:
                self._store(key, obj, raw)
                changed.append(obj)
        if not first:
            for obj in changed:
                self._notify(obj)
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        """Apply watch events from `version` on until the server ends the watch; the version
        reached."""
        self._watcher = k8s_watch.Watch()
        for event in self._watcher.stream(
            self._resource.get,
            namespace=self._namespace,
            label_selector=self._selector,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            serialize=False,
        ):
            obj = event["raw_object"]
            version = obj["metadata"]["resourceVersion"]
            if event["type"] == "BOOKMARK":
                continue
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if event["type"] == "DELETED":
                self._forget(key)
            else:
                self._store(key, obj, _compact(self.kind, obj))
            self._notify(obj)
            if self._stop.is_set():
                break
        return version

    def _store(self, key: Key, obj: dict[str, Any], raw: bytes) -> None:
        labels = {
            k: v
            for k, v in (obj["metadata"].get("labels") or {}).items()
            if k in self._index_labels
        }
        with self._lock:
            self._unindex(key)
            self._objects[key] = raw
            self._labels[key] = labels
            for label, value in labels.items():
                self._index.setdefault((label, key[0], value), set()).add(key[1])

    def _forget(self, key: Key) -> None:
        with self._lock:
            self._unindex(key)
            self._objects.pop(key, None)

    def _unindex(self, key: Key) -> None:
        for label, value in self._labels.pop(key, {}).items():
            names = self._index.get((label, key[0], value))
            if names is not None:
                names.discard(key[1])
                if not names:
                    del self._index[(label, key[0], value)]

    def _notify(self, obj: dict[str, Any]) -> None:
        try:
            self._on_change(obj)
        except Exception:  # a failing listener must not stop the view
            log.exception("handling a change to %s %s failed", self.kind[1], obj["metadata"])


class ChildView:
    """The informers of every kind the reconcilers read, in `namespaces` (every namespace when
    empty: the operator's RBAC is then cluster-wide); `on_change` hears of every change."""

    def __init__(
        self,
        api: k8s.ApiClient,
        kinds: Iterable[Kind],
        *,
        selector: str,
        index_labels: Iterable[str],
        on_change: OnChange,
        namespaces: Iterable[str] = (),
    ) -> None:
        labels = tuple(index_labels)
        scopes: tuple[str | None, ...] = tuple(namespaces) or (None,)
        kinds = tuple(dict.fromkeys(kinds))
        # The watches get connections of their own: each holds one open for minutes, and in the
        # reconciles' pool they would crowd out the requests.
        conf = copy.copy(api.configuration)
        conf.connection_pool_maxsize = len(kinds) * len(scopes) + 1
        dyn = DynamicClient(k8s.ApiClient(conf))
        self._informers = {
            (kind, ns): Informer(
                dyn, kind, ns, selector=selector, index_labels=labels, on_change=on_change
            )
            for kind in kinds
            for ns in scopes
        }

    @classmethod
    def of_children(
        cls, api: k8s.ApiClient, on_change: OnChange, namespaces: Iterable[str] = ()
    ) -> ChildView:
        """The view both kinds' reconciles read: every kind they create, their pods, by owner."""
        return cls(
            api,
            [*MANAGED_KINDS, *BATCH_KINDS, ("v1", "Pod")],
            selector=f"app.kubernetes.io/managed-by={MANAGED_BY}",
            index_labels=(DEPLOYMENT_LABEL, BATCHJOB_LABEL),
            on_change=on_change,
            namespaces=namespaces,
        )

    def start(self) -> None:
        for informer in self._informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self._informers.values():
            informer.stop()

    def dead(self) -> list[str]:
        """The kinds whose watch thread has ended."""
        return [f"watch of {k[1]}" for (k, _ns), i in self._informers.items() if not i.alive()]

    def wait_synced(self, timeout: float) -> bool:
        """Whether every kind has been listed, waiting up to `timeout` seconds for it."""
        deadline = time.monotonic() + timeout
        return all(
            i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self._informers.values()
        )

    def informer(self, api_version: str, kind: str, namespace: str) -> Informer:
        found = self._informers.get(((api_version, kind), None))
        if found is None:  # one informer per watched namespace
            found = self._informers.get(((api_version, kind), namespace))
        if found is None:
            raise KeyError(f"{kind} ({api_version}) in {namespace} is not in the operator's view")
        return found

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.informer(api_version, kind, namespace).get(namespace, name)

    def by_label(
        self, api_version: str, kind: str, namespace: str, label: str, value: str
    ) -> list[dict[str, Any]]:
        return self.informer(api_version, kind, namespace).by_label(namespace, label, value)

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API server serves this kind, as last looked up (True until then)."""
        return all(
            i.served is not False
            for (k, _ns), i in self._informers.items()
            if k == (api_version, kind)
        )

    def size(self) -> int:
        """How many objects the view holds."""
        return sum(len(i) for i in self._informers.values())
