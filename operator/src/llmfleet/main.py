"""kopf handlers: thin, each delegates to the controller and turns its outcome into kopf's
control flow (TemporaryError for not-yet, PermanentError for invalid)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from llmfleet import API_GROUP, API_VERSION, FIELD_MANAGER
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL
from llmfleet.reconcile.base import InvalidSpecError, Reconciler
from llmfleet.reconcile.batchjob import BatchJobController
from llmfleet.reconcile.errors import api_error
from llmfleet.render.batchjob import BATCHJOB_LABEL
from llmfleet.render.names import DEPLOYMENT_LABEL, MANAGED_BY

log = logging.getLogger(__name__)
# kopf does not export the type of kopf.PRESENT; the decorators accept this mapping as is.
CHILDREN: Mapping[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    DEPLOYMENT_LABEL: kopf.PRESENT,
}


def _reconcile(controller: Reconciler[Any, Any], body: kopf.Body) -> None:
    try:
        controller.reconcile(body.metadata["namespace"], body.metadata["name"])
    except InvalidSpecError as e:
        raise kopf.PermanentError(str(e)) from e
    except ApiException as e:
        # Conflicts and server hiccups pass; RBAC or admission refusals need a person, so retry
        # slowly while the status and log say why.
        delay = 5 if e.status in (409, 429) or (e.status or 500) >= 500 else 60
        raise kopf.TemporaryError(api_error(e), delay=delay) from e


# --- LLMBatchJob (begin) ---------------------------------------------------------------------
BATCH_CHILDREN: Mapping[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    BATCHJOB_LABEL: kopf.PRESENT,
}


def install_batch() -> None:
    """Register the LLMBatchJob handlers: the job itself, its Job and pods, and a poller that
    reads running jobs' progress (their pods change no object while they work)."""

    @kopf.on.startup()
    def start_batch(memo: kopf.Memo, **_: Any) -> None:
        memo.batch = BatchJobController(memo.controller.api, memo.controller.profiles)
        memo.batch.start_polling()

    @kopf.on.cleanup()
    def stop_batch(memo: kopf.Memo, **_: Any) -> None:
        memo.batch.stop_polling()

    @kopf.on.resume(API_GROUP, API_VERSION, BATCH_PLURAL)
    @kopf.on.create(API_GROUP, API_VERSION, BATCH_PLURAL)
    @kopf.on.update(API_GROUP, API_VERSION, BATCH_PLURAL, field="spec")
    def reconcile_batch(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        _reconcile(memo.batch, body)

    @kopf.on.event("batch", "v1", "jobs", labels=BATCH_CHILDREN)
    @kopf.on.event("", "v1", "pods", labels=BATCH_CHILDREN)
    def batch_child_changed(
        labels: Mapping[str, str], namespace: str | None, memo: Any, **_: Any
    ) -> None:
        owner = labels.get(BATCHJOB_LABEL)
        if owner and namespace:
            memo.batch.reconcile_by_name(namespace, owner)


# --- LLMBatchJob (end) -----------------------------------------------------------------------


def install() -> None:
    """Register the handlers."""

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=API_GROUP, key="last-handled-configuration"
        )
        settings.posting.reporting_component = FIELD_MANAGER
        settings.posting.level = logging.WARNING
        # The CRDs come with the chart; no need to watch CRDs (and hold RBAC for it).
        settings.scanning.disabled = True
        settings.watching.server_timeout = 300
        settings.execution.max_workers = 8
        # React to a burst of events on one object once, but without kopf's 0.1 s default wait.
        settings.batching.batch_window = 0.02

    @kopf.on.resume(API_GROUP, API_VERSION, PLURAL)
    @kopf.on.create(API_GROUP, API_VERSION, PLURAL)
    @kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec")
    def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        _reconcile(memo.controller, body)

    # A child changed (hand edit, pods becoming ready, HPA scaling): reconcile its owner.
    @kopf.on.event("apps", "v1", "deployments", labels=CHILDREN)
    @kopf.on.event("autoscaling", "v2", "horizontalpodautoscalers", labels=CHILDREN)
    @kopf.on.event("", "v1", "services", labels=CHILDREN)
    @kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=CHILDREN)
    @kopf.on.event("", "v1", "pods", labels=CHILDREN)
    def child_changed(
        labels: Mapping[str, str], namespace: str | None, memo: Any, **_: Any
    ) -> None:
        owner = labels.get(DEPLOYMENT_LABEL)
        if owner and namespace:
            memo.controller.reconcile_by_name(namespace, owner)

    install_batch()  # LLMBatchJob
