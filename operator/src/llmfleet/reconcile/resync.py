"""Periodic resync of every LLMDeployment, run by the operator itself rather than a kopf timer:
kopf timers need a finalizer, and a finalizer would block deleting an LLMDeployment (and its
namespace) while the operator is down. Children are garbage-collected through owner references,
so nothing else needs one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from llmfleet import API_GROUP, API_VERSION
from llmfleet import metrics as m
from llmfleet.reconcile.controller import Controller

log = logging.getLogger(__name__)


class Resyncer:
    def __init__(self, controller: Controller, namespaces: Sequence[str], interval: float) -> None:
        self._controller = controller
        self._namespaces = tuple(namespaces)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmfleet-resync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _names(self) -> list[tuple[str, str]]:
        resource = self._controller.applier.resource(f"{API_GROUP}/{API_VERSION}", "LLMDeployment")
        scopes = self._namespaces or (None,)
        found = []
        for ns in scopes:
            for item in resource.get(namespace=ns).items:
                found.append((item.metadata.namespace, item.metadata.name))
        return found

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                names = self._names()
            except Exception:  # a failed list must not end the loop
                log.exception("resync: cannot list LLMDeployments")
                continue
            for namespace, name in names:
                if self._stop.is_set():
                    return
                try:
                    self._controller.reconcile_by_name(namespace, name)
                except Exception as e:  # one bad resource must not starve the others
                    m.RECONCILES.labels(result="error").inc()
                    log.warning("resync of %s/%s failed: %s", namespace, name, e)
