"""kopf handlers: thin, each delegates to a kind's reconciler and turns its outcome into kopf's
control flow (TemporaryError for not-yet, PermanentError for invalid)."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from llmfleet import API_GROUP, API_VERSION, FIELD_MANAGER
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL
from llmfleet.reconcile.base import InvalidSpecError, NotSyncedError, Reconciler
from llmfleet.reconcile.errors import describe_error

log = logging.getLogger(__name__)


def _reconcile(controller: Reconciler[Any, Any], body: kopf.Body) -> None:
    namespace, name = body.metadata["namespace"], body.metadata["name"]
    try:
        controller.reconcile(namespace, name)
    except InvalidSpecError as e:
        raise kopf.PermanentError(str(e)) from e
    except NotSyncedError as e:
        raise kopf.TemporaryError(str(e), delay=1) from e
    except Exception as e:
        # Everything else is retried after the resource's own backoff (status says so once it
        # repeats); a traceback would say nothing the message does not.
        raise kopf.TemporaryError(
            describe_error(e), delay=controller.retry_in(namespace, name)
        ) from e


def install(registry: kopf.OperatorRegistry | None = None) -> None:
    """Register the handlers (in kopf's default registry, or `registry`). Children reach their
    owners through the manager's view."""

    @kopf.on.startup(registry=registry)
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

    @kopf.on.resume(API_GROUP, API_VERSION, PLURAL, registry=registry)
    @kopf.on.create(API_GROUP, API_VERSION, PLURAL, registry=registry)
    @kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec", registry=registry)
    def reconcile(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        _reconcile(memo.manager.deployments, body)

    @kopf.on.resume(API_GROUP, API_VERSION, BATCH_PLURAL, registry=registry)
    @kopf.on.create(API_GROUP, API_VERSION, BATCH_PLURAL, registry=registry)
    @kopf.on.update(API_GROUP, API_VERSION, BATCH_PLURAL, field="spec", registry=registry)
    def reconcile_batch(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        _reconcile(memo.manager.batch, body)
