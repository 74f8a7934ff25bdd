"""The reconcile every kind shares: level-based (always on the object as it is now), the spec
validated and planned or else refused with its reason in status and a Warning Event, an API
server's refusal reported once, and status written once, only when it changed.

Each kind (`llmdeployment/controller.py`, `llmbatchjob/batchjob.py`) supplies what differs: its
spec and plan, the status of a refusal, and what it does with a planned spec. The kind's queue
(`loop.py`) runs it: one at a time per resource, and again after a failure (`work`).
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from kubernetes import client as k8s
from pydantic import BaseModel, ValidationError

from llmfleet import API_GROUP, API_VERSION, metrics_reconcile
from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.models import describe_validation_error
from llmfleet.models.status import status_json
from llmfleet.planner import Plan, PlanError

from .apply import Applier, ApplyResult
from .cache import ChildView
from .causes import VOLUME_EVENTS, Blocker, Reference, newly_blocked
from .conditions import DEGRADED, TRUE, condition, keep_transition_times
from .errors import UnavailableError, describe_error, is_refusal, retry_after
from .events import EventRecorder
from .modelconfig import ModelConfigs
from .pod_blockers import blockers, mount_pending
from .workqueue import Backoff

log = logging.getLogger(__name__)
APPLY_REFUSED = "ApplyRefused"
RECONCILE_FAILING = "ReconcileFailing"
# Transient failures (the API server busy, restarting, a conflict) stay out of status until they
# repeat: one blip is retried unseen, a run of them is something an operator should see.
FAILING_AFTER = 3
SYNC_TIMEOUT = 10.0  # a reconcile waits this long for the view's first lists
# Seconds until a reconcile that found the view not listed yet runs again (no backoff: it will be).
NOT_SYNCED_RETRY = 1.0
MIN_RETRY = 0.5  # the shortest wait after a failure, whatever the backoff's jitter drew
Key = tuple[str, str]  # namespace, name
SpecT = TypeVar("SpecT", bound=BaseModel)
StatusT = TypeVar("StatusT", bound=BaseModel)


class InvalidSpecError(Exception):
    """The spec cannot run as it is; retrying will not help until the user changes it."""


class NotSyncedError(Exception):
    """The view of the children has not been listed yet (the operator just started)."""


class Reconciler(ABC, Generic[SpecT, StatusT]):
    """Reconciles the resources of one kind; a subclass per kind."""

    api_version: ClassVar[str] = f"{API_GROUP}/{API_VERSION}"
    kind: ClassVar[str]
    spec_model: type[SpecT]
    status_model: type[StatusT]

    def __init__(
        self,
        api: k8s.ApiClient,
        profiles: GpuProfiles = DEFAULT_GPU_PROFILES,
        view: ChildView | None = None,
        model_configs: ModelConfigs | None = None,
    ) -> None:
        """`view`: the watch-fed children the operator shares between kinds; without one the
        reconciler starts its own (which tells nobody of changes). `model_configs`: where
        config.json is read, shared between kinds; without one, from the public Hub."""
        self.api = api
        self.profiles = profiles
        self.model_configs = model_configs or ModelConfigs(api)
        if view is None:
            view = ChildView.of_children(api, on_change=lambda _obj: None)
            view.start()
        self.view = view
        self.applier = Applier(api, view)
        self.events = EventRecorder(api)
        # Failures in a row per resource: the delay `work` asks the queue to wait, and when
        # status says Degraded.
        self.backoff = Backoff()
        self._guard = threading.Lock()
        self._refusals: dict[Key, str] = {}  # the last API refusal reported, per resource

    # --- what a kind supplies ----------------------------------------------------------------

    @abstractmethod
    def plan(self, spec: SpecT, namespace: str) -> Plan:
        """The layout of a valid spec in `namespace`; raises PlanError when none fits, and
        UnavailableError when what it needs to plan (config.json) is out of reach for now."""

    @abstractmethod
    def refused_status(self, old: StatusT, generation: int, reason: str, message: str) -> StatusT:
        """The status of a resource refused for `reason`."""

    @abstractmethod
    def run(self, body: dict[str, Any], old: StatusT, spec: SpecT, planned: Plan) -> ApplyResult:
        """Act on a valid, planned spec: create or update what it needs and write its status
        (`write_status`, once)."""

    def refused(self, namespace: str, name: str, new: StatusT, spec: SpecT | None) -> None:
        """Called once a refusal is in status; `spec` when it was valid but cannot run."""

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop what is kept about it."""

    # --- the shared reconcile ----------------------------------------------------------------

    def fetch(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.applier.get(self.api_version, self.kind, namespace, name)
        # Events name the object by its apiVersion and kind.
        return (
            None if found is None else {"apiVersion": self.api_version, "kind": self.kind, **found}
        )

    def names(self, namespaces: Sequence[str]) -> list[Key]:
        """Every resource of this kind in `namespaces` (all namespaces when empty)."""
        return [
            (item["metadata"]["namespace"], item["metadata"]["name"])
            for ns in namespaces or (None,)
            for item in self.applier.list(self.api_version, self.kind, ns, "")
        ]

    def work(self, namespace: str, name: str) -> float | None:
        """One run of the kind's queue: reconcile, and say in how many seconds the queue runs it
        again, or None. An invalid spec is not retried (status says why; the object's next
        generation is enqueued by its event), a view not listed yet is tried again in
        NOT_SYNCED_RETRY, and any other failure after the resource's backoff."""
        try:
            self.reconcile(namespace, name)
        except InvalidSpecError:
            return None
        except NotSyncedError:
            return NOT_SYNCED_RETRY
        except Exception as e:
            delay = max(self.backoff.delay((namespace, name)), MIN_RETRY)
            log.info(
                "%s %s/%s: %s; again in %.1fs", self.kind, namespace, name, describe_error(e), delay
            )
            return delay
        return None

    def reconcile(self, namespace: str, name: str) -> ApplyResult:
        """Reconcile one resource, raising what failed. Never run twice at once for one resource
        (its status writes would interleave): in the operator only its kind's queue runs it."""
        key = (namespace, name)
        start = time.monotonic()
        outcome = "error"
        body: dict[str, Any] | None = None
        try:
            if not self.view.wait_synced(SYNC_TIMEOUT):
                raise NotSyncedError("the operator's view of the children is not listed yet")
            # Level-based: always act on the object as it is now, never on the copy an event
            # carried, so status written by the previous reconcile is what we compare against.
            body = self.fetch(namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                outcome = ""
                self._drop(key)
                self.forget(namespace, name)
                metrics_reconcile.forget(self.kind, namespace, name)
                return ApplyResult()
            result = self._reconcile(body)
            outcome = "changed" if result.writes else "unchanged"
            self._drop(key)
            return result
        except InvalidSpecError:
            outcome = "invalid"
            self.backoff.succeeded(key)  # nothing to retry until the spec changes
            raise
        except Exception as e:
            metrics_reconcile.record_reconcile_error(self.kind, namespace, name, e)
            delay = self.backoff.failed(key, retry_after(e))
            if body is not None:
                if is_refusal(e):
                    self._report_refusal(body, describe_error(e))
                elif (
                    self.backoff.failures(key) >= FAILING_AFTER
                    and not isinstance(e, UnavailableError)  # in status already
                ):
                    self._report_failing(body, describe_error(e), delay)
            raise
        finally:
            if outcome:  # a resource that is gone is no reconcile
                metrics_reconcile.count_reconcile(self.kind, outcome, time.monotonic() - start)

    def _reconcile(self, body: dict[str, Any]) -> ApplyResult:
        old = self.stored_status(body)
        try:
            spec = self.spec_model.model_validate(body.get("spec") or {})
        except ValidationError as e:
            self.refuse(body, old, "InvalidSpec", describe_validation_error(e), None)
        try:
            planned = self.plan(spec, body["metadata"]["namespace"])
        except PlanError as e:
            self.refuse(body, old, e.reason, str(e), spec)
        except UnavailableError as e:
            # Said as a refusal is, but retried: nothing in the spec is wrong.
            self._say_refused(body, old, e.reason, str(e), spec)
            raise
        return self.run(body, old, spec, planned)

    def refuse(
        self, body: dict[str, Any], old: StatusT, reason: str, message: str, spec: SpecT | None
    ) -> NoReturn:
        """Say in status (and, when that changed it, a Warning Event) why the spec cannot run."""
        self._say_refused(body, old, reason, message, spec)
        raise InvalidSpecError(message)

    def _say_refused(
        self, body: dict[str, Any], old: StatusT, reason: str, message: str, spec: SpecT | None
    ) -> None:
        new = self.refused_status(old, generation(body), reason, message)
        if self.write_status(body, new):
            self.events.emit(body, "Warning", reason, message)
        self.refused(body["metadata"]["namespace"], body["metadata"]["name"], new, spec)

    def stored_status(self, body: dict[str, Any]) -> StatusT:
        """The status `body` carries, typed. One the models cannot read (written by another
        version of the operator) counts as empty: this reconcile writes it anew."""
        try:
            return self.status_model.model_validate(body.get("status") or {})
        except ValidationError as e:
            log.warning("%s %s: status unreadable, rewritten: %s", self.kind, key_of(body), e)
            return self.status_model()

    def blockers(self, pods: Sequence[dict[str, Any]], refs: Sequence[Reference]) -> list[Blocker]:
        """Why `pods` cannot run, attributed to `refs`. The volume Events are read only for the
        first pod waiting for its volumes (a LIST per reason, and only while one waits); of each
        reason the newest, since the kubelet's older words may be of a cause that went."""
        waiting = [p for p in pods if mount_pending(p)][:1]
        said = {
            p["metadata"]["name"]: [
                text
                for reason in VOLUME_EVENTS
                for text in self.events.said_about(
                    p["metadata"]["namespace"], p["metadata"]["uid"], reason
                )[-1:]
            ]
            for p in waiting
        }
        return blockers(pods, refs, said)

    def announce_blockers(
        self, body: dict[str, Any], old_message: str, now: Sequence[Blocker]
    ) -> None:
        """One Warning Event per cause that `old_message` (the status before) did not mention."""
        for b in newly_blocked(old_message, now):
            self.events.emit(body, "Warning", b.reason, f"{b.summary} ({b.said_by}; pod {b.pod})")

    def write_status(self, body: dict[str, Any], new: StatusT) -> bool:
        """Write `new` unless the API server would then hold the status `body` has; whether it
        wrote. The one place a status is serialised.

        Only onto the object `body` was read as: the patch carries its resourceVersion, so a
        status another writer (a newer leader) wrote since is never overwritten; the API server
        answers 409 instead, and the reconcile fails and is retried from a fresh read through its
        queue. `body` takes the new resourceVersion, for a second write of the same reconcile."""
        old: dict[str, Any] = body.get("status") or {}
        written = status_json(new)
        if _as_stored(old) == _as_stored(written):
            return False
        meta = body["metadata"]
        patch: dict[str, Any] = {
            "status": {**{k: None for k in old if k not in written}, **written}
        }
        if meta.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        stored = self.applier.resource(self.api_version, self.kind).status.patch(
            body=patch,
            name=meta["name"],
            namespace=meta["namespace"],
            content_type="application/merge-patch+json",
        )
        metrics_reconcile.count_write("patch", f"{self.kind}/status")
        version = getattr(getattr(stored, "metadata", None), "resourceVersion", None)
        if isinstance(version, str):
            meta["resourceVersion"] = version
        return True

    def _report_refusal(self, body: dict[str, Any], message: str) -> None:
        """A Warning Event when the API server refuses a write (a quota, an admission webhook,
        RBAC, a child's name too long), once per distinct refusal until a reconcile succeeds:
        retries repeat it. And `Degraded=True` in status with the server's words, where `kubectl
        get` and `describe` look: a resource refused on its first apply would otherwise have no
        status at all. The next reconcile that applies everything computes Degraded anew."""
        self._degraded(body, APPLY_REFUSED, message)

    def _report_failing(self, body: dict[str, Any], error: str, delay: float) -> None:
        """`Degraded=True` once transient failures (the API server overloaded or restarting,
        conflicts) repeat, with the last error and when the next try comes; a Warning Event
        when the error is new. Cleared like a refusal, by the next reconcile that succeeds."""
        failures = self.backoff.failures((body["metadata"]["namespace"], body["metadata"]["name"]))
        self._degraded(
            body,
            RECONCILE_FAILING,
            f"reconciles keep failing, the last with {error}",
            f" ({failures} in a row; next try in {delay:.0f}s)",
        )

    def _degraded(self, body: dict[str, Any], reason: str, message: str, when: str = "") -> None:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        with self._guard:
            first = self._refusals.get(key) != message
            self._refusals[key] = message
        old = self.stored_status(body)
        kept = [c for c in getattr(old, "conditions", ()) if c.type != DEGRADED]
        degraded = condition(DEGRADED, TRUE, reason, message + when, generation(body))
        conditions = keep_transition_times([*kept, degraded], getattr(old, "conditions", ()))
        try:
            self.write_status(body, old.model_copy(update={"conditions": conditions}))
        except Exception as e:  # the failure itself is what matters; it is in the Event and log
            log.warning("%s %s: status not written: %s", self.kind, key_of(body), describe_error(e))
        if first:
            self.events.emit(body, "Warning", reason, message)

    def _drop(self, key: Key) -> None:
        """A reconcile succeeded, or the resource is gone: nothing to report or back off from."""
        with self._guard:
            self._refusals.pop(key, None)
        self.backoff.succeeded(key)


def generation(body: dict[str, Any]) -> int:
    return int(body["metadata"].get("generation", 1))


def key_of(body: dict[str, Any]) -> str:
    return f"{body['metadata']['namespace']}/{body['metadata']['name']}"


def _as_stored(value: Any) -> Any:
    """`value` as the API server keeps it after a merge patch: without null members, at any
    depth (a null deletes a member, and is dropped from values that replace, lists included).
    Comparing only the top level saw a change in every nested null (status.predicted's, each
    shard's) and rewrote status on every resync."""
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    return value
