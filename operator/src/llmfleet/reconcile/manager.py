"""The operator's control loops: one per kind (`machinery/loop.py`), each a queue of keys and its
workers, and what feeds them: the watch-fed view of the children, the resync of every LLMDeployment,
the poll of running LLMBatchJobs, and kopf's watch of the two kinds (`main.py`, through `heard`).

A change to a child (a pod becoming ready, the HPA scaling, a hand edit, a delete) arrives through
the view and enqueues its owner, named by the child's labels. The queues' workers are the only
writers; kopf's handlers and the periodic loops only enqueue.

Watching and writing start apart: a standby replica keeps the view warm (`start_watching`) and
writes nothing; the leader also runs the queues, the resync and the poll (`start_writing`).
Changes heard while standing by wait in the queues, deduplicated per owner.

Stopping ends every writer before the caller hands the Lease over: the loops are told to stop,
the calls to pods in flight beside them (a standby engine's sleep) are aborted, and all are joined
for up to `DRAIN_SECONDS`; then the write gate shuts, so what still runs (a reconcile
waiting on an adapter fetch or load) can write nothing more, and the writes already admitted are
waited for (each bounded by the gate's call timeout).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

from llmfleet.catalog.gpu_profiles import GpuProfiles
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL as DEPLOYMENT_PLURAL
from llmfleet.reconcile.llmbatchjob.batchjob import BatchJobController
from llmfleet.reconcile.llmdeployment.controller import Controller
from llmfleet.reconcile.llmdeployment.fetcher_token import KeySecret
from llmfleet.reconcile.machinery.cache import ChildView
from llmfleet.reconcile.machinery.loop import KindLoop
from llmfleet.reconcile.machinery.modelconfig import ModelConfigs
from llmfleet.reconcile.machinery.resync import Resyncer
from llmfleet.reconcile.machinery.writegate import GatedApiClient, WriteGate
from llmfleet.render.batchjob import BATCHJOB_LABEL
from llmfleet.render.names import DEPLOYMENT_LABEL
from llmfleet.settings import OperatorSettings

# Reconciles of different resources run side by side; most of their time is spent waiting on the
# API server, so a few threads keep 2 CPUs busy without queueing behind one slow resource.
WORKERS = 4
# How long stopping waits for the reconciles under way before shutting the write gate on them. A
# reconcile that waits longer (an adapter fetch: up to 300 s) is cut off at its next write.
DRAIN_SECONDS = 15.0
# How often the stall poll asks which LLMDeployments are due (each is due every third of its
# window, at least MIN_POLL_SECONDS apart).
STALL_POLL_TICK_SECONDS = 1.0

log = logging.getLogger(__name__)


class Manager:
    def __init__(
        self,
        api: k8s.ApiClient,
        settings: OperatorSettings,
        profiles: GpuProfiles,
        fetcher_key: KeySecret | None,
    ) -> None:
        """`api`: the writers' client; a `GatedApiClient` puts every write through its gate.
        `fetcher_key`: the operator's key for the adapter fetchers' tokens (None: one of this
        process's own)."""
        namespaces = settings.namespaces
        self.gate = api.gate if isinstance(api, GatedApiClient) else WriteGate.always_open()
        self.view = ChildView.of_children(api, self._changed, namespaces)
        # One cache of config.json for both kinds: a model read for one is read for all.
        model_configs = ModelConfigs(api, settings.hf_endpoint)
        self.deployments = Controller(
            api,
            settings.fleet,
            profiles,
            view=self.view,
            model_configs=model_configs,
            fetcher_key=fetcher_key,
        )
        self.batch = BatchJobController(
            api, settings.fleet, profiles, view=self.view, model_configs=model_configs
        )
        # By the label that names a child's owner, and by the plural kopf names the kind by.
        self.loops = {
            DEPLOYMENT_LABEL: KindLoop(DEPLOYMENT_PLURAL, self.deployments, WORKERS),
            BATCHJOB_LABEL: KindLoop(BATCH_PLURAL, self.batch, 2),
        }
        self._by_plural = {
            DEPLOYMENT_PLURAL: self.loops[DEPLOYMENT_LABEL],
            BATCH_PLURAL: self.loops[BATCHJOB_LABEL],
        }
        # Level-based safety net: reverts drift nobody told us about.
        self._resync = Resyncer(
            "resync",
            lambda: self.deployments.names(namespaces),
            self.loops[DEPLOYMENT_LABEL].enqueue_periodic,
            settings.resync_seconds,
        )
        # Stall detection: each watched LLMDeployment is queued every third of its window, so its
        # engines are looked at however quiet its children are
        # (reconcile/llmdeployment/stallwatch.py).
        self._stall_poll = Resyncer(
            "stall poll",
            self.deployments.stalls.due,
            self.loops[DEPLOYMENT_LABEL].enqueue_periodic,
            STALL_POLL_TICK_SECONDS,
        )

        # Standby engines: their queue is read every few seconds
        # (reconcile/llmdeployment/standbyloop.py).
        self._standby_poll = Resyncer(
            "standby poll",
            self.deployments.standby.due,
            self.loops[DEPLOYMENT_LABEL].enqueue_periodic,
            STALL_POLL_TICK_SECONDS,
        )

        # The standby engines' sleep and wake calls run beside the queue; each one's end
        # enqueues its LLMDeployment (reconcile/machinery/backgroundcalls.py).
        self._calls = self.deployments.standby.calls
        self._calls.notify_to(self.loops[DEPLOYMENT_LABEL].enqueue)

        self.writing = False

    def start_watching(self) -> None:
        self.view.start()

    def start_writing(self) -> None:
        for loop in self.loops.values():
            loop.queue.start()
        self._resync.start()
        self._stall_poll.start()
        self._standby_poll.start()
        self.batch.start_polling(self.loops[BATCHJOB_LABEL].enqueue_periodic)
        self.writing = True

    def stop(self, timeout: float = DRAIN_SECONDS) -> None:
        """Stop every writer: the loops (joined for up to `timeout` seconds), then the write gate
        for whatever still runs, then the writes already admitted. Returns within `timeout` plus
        one call timeout; only then may the Lease be released."""
        end = time.monotonic() + timeout
        if self.writing:
            self.batch.stop_polling()
            self._resync.stop()
            self._stall_poll.stop()
            self._standby_poll.stop()
            for loop in self.loops.values():
                loop.queue.stop()
            # Before the queues are joined: a reconcile still running starts no call, and the
            # calls in flight are aborted rather than waited for (a sleep may take minutes).
            self._calls.stop()
            ended = [loop.queue.join(end - time.monotonic()) for loop in self.loops.values()]
            ended.append(self._calls.join(end - time.monotonic()))
            ended.append(self._resync.join(end - time.monotonic()))
            ended.append(self._stall_poll.join(end - time.monotonic()))
            ended.append(self._standby_poll.join(end - time.monotonic()))
            ended.append(self.batch.stop_polling(end - time.monotonic()))
            if not all(ended):
                log.warning(
                    "reconciles still under way after %g s: their writes are refused", timeout
                )
        self.gate.close()
        if not self.gate.drain(self.gate.call_timeout or timeout):
            log.warning("%d writes still in flight at shutdown", self.gate.in_flight)
        self.view.stop()

    def dead(self) -> list[str]:
        """Which of the loops that should run have ended (for /healthz)."""
        dead = self.view.dead()
        if self.writing:
            dead += [f"{name} queue" for name, lp in self.loops.items() if not lp.queue.alive()]
            if not self._resync.alive():
                dead.append("resync")
            if not self._stall_poll.alive():
                dead.append("stall poll")
            if not self._standby_poll.alive():
                dead.append("standby poll")
            if not self.batch.polling():
                dead.append("batch poll")
        return dead

    def heard(self, plural: str, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """kopf heard an event of the kind `plural`: enqueue it unless only its status or
        metadata changed. Whether it did."""
        return self._by_plural[plural].heard(event_type, body)

    def _changed(self, obj: dict[str, Any]) -> None:
        """A child changed: enqueue its owner."""
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        for label, loop in self.loops.items():
            owner = labels.get(label)
            if owner:
                loop.enqueue(meta["namespace"], owner)
