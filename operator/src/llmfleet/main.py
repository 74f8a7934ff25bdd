"""kopf's part: it watches the two custom resources, and its handlers only enqueue. Each event goes
to the kind's control loop (`reconcile/machinery/loop.py`), which enqueues the key unless only
status or metadata changed; the loop's queue reconciles, retries and reports. on.event handlers keep
no progress or last-handled state in the objects, so kopf writes nothing to them."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmfleet import API_GROUP, API_VERSION, FIELD_MANAGER
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL

log = logging.getLogger(__name__)


def install(registry: kopf.OperatorRegistry | None = None) -> None:
    """Register the handlers (in kopf's default registry, or `registry`); `memo.manager` holds
    the loops they enqueue into."""

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.reporting_component = FIELD_MANAGER
        settings.posting.level = logging.WARNING
        # The CRDs come with the chart; no need to watch CRDs (and hold RBAC for it).
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        settings.execution.max_workers = 8
        # Fold a burst of events on one object into one, without kopf's 0.1 s default wait.
        settings.batching.batch_window = 0.02

    for plural in (PLURAL, BATCH_PLURAL):
        _enqueue_events_of(plural, registry)


def _enqueue_events_of(plural: str, registry: kopf.OperatorRegistry | None) -> None:
    @kopf.on.event(API_GROUP, API_VERSION, plural, id=f"enqueue-{plural}", registry=registry)
    def enqueue(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # `type` is None for an object kopf listed rather than watched (at start, or relisting).
        memo.manager.heard(plural, event.get("type"), body)
