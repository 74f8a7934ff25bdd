"""One idempotent, level-based reconcile of an LLMDeployment: plan, render, apply what changed,
prune what is no longer rendered, then write status once (and only when it changed)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from llmfleet import API_GROUP, API_VERSION
from llmfleet import metrics as m
from llmfleet.models import LLMDeploymentSpec, describe_validation_error
from llmfleet.models.profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.reconcile.apply import Applier, ApplyResult, ref
from llmfleet.reconcile.errors import api_error
from llmfleet.reconcile.events import EventRecorder
from llmfleet.reconcile.kvcache import EngineKVCache, reporting_engines
from llmfleet.reconcile.status import Observed, invalid_status, newly_unverified, ready_status
from llmfleet.render import Owner, engine_deployment_name, render_fleet
from llmfleet.render.names import DEPLOYMENT_LABEL, HTTP_PORT, MANAGED_BY
from llmfleet.render.router import COMPONENT_ROUTER, router_enabled, router_url
from llmfleet.render.service import endpoint_url

log = logging.getLogger(__name__)
PLURAL = "llmdeployments"


class InvalidSpecError(Exception):
    """The spec cannot be planned; retrying will not help until the user changes it."""


def children_selector(name: str) -> str:
    return f"{DEPLOYMENT_LABEL}={name},app.kubernetes.io/managed-by={MANAGED_BY}"


class Controller:
    def __init__(self, api: k8s.ApiClient, profiles: GpuProfiles = DEFAULT_GPU_PROFILES) -> None:
        self.api = api
        self.profiles = profiles
        self.applier = Applier(api)
        self.events = EventRecorder(api)
        self.kv_cache = EngineKVCache(HTTP_PORT)
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._queued: set[tuple[str, str]] = set()
        self._refusals: dict[tuple[str, str], str] = {}  # the last refusal reported, per resource

    @contextmanager
    def _locked(self, namespace: str, name: str) -> Iterator[None]:
        # Handlers for the resource and for its children may fire together; one reconcile at a
        # time per resource keeps status writes from interleaving.
        with self._locks_guard:
            lock = self._locks.setdefault((namespace, name), threading.Lock())
        with lock:
            yield

    def _report_refusal(self, body: dict[str, Any], message: str) -> None:
        """A Warning Event when the API server refuses a write (a quota, an admission webhook,
        RBAC), once per distinct refusal until a reconcile succeeds: retries repeat it."""
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if self._refusals.get(key) != message:
            self._refusals[key] = message
            self.events.emit(body, "Warning", "ApplyRefused", message)

    def fetch(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.applier.get(f"{API_GROUP}/{API_VERSION}", "LLMDeployment", namespace, name)

    def reconcile_by_name(self, namespace: str, name: str) -> None:
        """Reconcile from a child's event. Events that arrive while a reconcile of the same
        resource is queued (not yet started) fold into it: it reads everything afresh anyway."""
        key = (namespace, name)
        with self._locks_guard:
            if key in self._queued:
                return
            self._queued.add(key)
        # An invalid spec is already reported in status; the owner's own handler owns retries.
        with contextlib.suppress(InvalidSpecError):
            self.reconcile(namespace, name)

    def reconcile(self, namespace: str, name: str) -> ApplyResult:
        with self._locked(namespace, name):
            with self._locks_guard:
                self._queued.discard((namespace, name))
            # Level-based: always act on the object as it is now, never on the copy an event
            # carried, so status written by the previous reconcile is what we compare against.
            body = self.fetch(namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                m.forget(namespace, name)
                self.kv_cache.forget(namespace, name)
                return ApplyResult()
            start = time.monotonic()
            outcome = "error"
            try:
                result = self._reconcile(body)
                outcome = "changed" if result.writes else "unchanged"
                self._refusals.pop((namespace, name), None)
                return result
            except InvalidSpecError:
                outcome = "invalid"
                raise
            except ApiException as e:
                m.record_reconcile_error(namespace, name, e)
                self._report_refusal(body, api_error(e))
                raise
            except Exception as e:
                m.record_reconcile_error(namespace, name, e)
                raise
            finally:
                m.RECONCILE_DURATION.observe(time.monotonic() - start)
                m.RECONCILES.labels(result=outcome).inc()

    def _reconcile(self, body: dict[str, Any]) -> ApplyResult:
        meta = body["metadata"]
        ns, name, generation = meta["namespace"], meta["name"], int(meta.get("generation", 1))
        old_status: dict[str, Any] = dict(body.get("status") or {})
        owner = Owner(name=name, namespace=ns, uid=meta["uid"])

        try:
            spec = LLMDeploymentSpec.model_validate(body.get("spec") or {})
            planned = plan(spec, self.profiles)
        except (ValidationError, PlanError) as e:
            message = describe_validation_error(e) if isinstance(e, ValidationError) else str(e)
            reason = "InvalidSpec" if isinstance(e, ValidationError) else "PlanningFailed"
            new = invalid_status(old_status, generation, reason, message)
            if self._write_status(body, old_status, new):
                self.events.emit(body, "Warning", reason, message)
            m.set_planned(ns, name, None)
            m.set_conditions(ns, name, new["conditions"])
            if isinstance(e, PlanError):
                m.record_planner_decision(ns, name, spec, None)
            raise InvalidSpecError(message) from e

        result = ApplyResult()
        live: dict[str, dict[str, Any]] = {}
        rendered = render_fleet(owner, spec, planned)
        for obj in rendered:
            live[ref(obj)] = self.applier.apply(obj, result)

        engine_name = engine_deployment_name(name, planned)
        engine = live.get(f"Deployment/{engine_name}")
        selector = children_selector(name)
        old_engines = tuple(
            d
            for d in self.applier.list("apps/v1", "Deployment", ns, selector)
            if d["metadata"]["name"] != engine_name and not _is_router(d)
        )
        # The previous layout keeps serving until the new one holds its minimum replicas.
        new_ready = int(((engine or {}).get("status") or {}).get("readyReplicas") or 0)
        hold = [] if new_ready >= max(1, planned.min_replicas) else [ref(d) for d in old_engines]
        self.applier.prune(
            namespace=ns,
            selector=selector,
            owner_uid=owner.uid,
            keep=live.keys(),
            hold=hold,
            result=result,
        )
        still_old = tuple(d for d in old_engines if ref(d) in hold)

        pods = tuple(p for p in self.applier.list("v1", "Pod", ns, selector) if not _is_router(p))
        template = ((engine or {}).get("spec") or {}).get("template")
        observed = Observed(
            engine=engine,
            old_engines=still_old,
            hpa=live.get(f"HorizontalPodAutoscaler/{name}"),
            pods=pods,
            # Read once per pod (cached by uid): an idle resync dials no engine.
            kv_cache_tokens=self.kv_cache.measure(ns, name, reporting_engines(pods, template)),
        )
        new = ready_status(
            old=old_status,
            generation=generation,
            plan=planned,
            observed=observed,
            endpoint=router_url(owner) if router_enabled(spec, planned) else endpoint_url(owner),
        )
        self._announce(body, old_status, planned, result)
        unverified = newly_unverified(old_status, new)
        if self._write_status(body, old_status, new) and unverified is not None:
            # Once, when PlanVerified turns False; not on every resync while it stays so.
            self.events.emit(body, "Warning", "PlanNotVerified", unverified)
        m.set_planned(ns, name, planned)
        m.record_planner_decision(ns, name, spec, planned)
        m.set_conditions(ns, name, new["conditions"])
        m.observe_engine_startups(ns, name, observed.pods)
        return result

    def _announce(
        self, body: dict[str, Any], old_status: dict[str, Any], planned: Plan, result: ApplyResult
    ) -> None:
        summary = planned.summary().model_dump(by_alias=True, mode="json")
        if old_status.get("plan") != summary:
            self.events.emit(body, "Normal", "Planned", planned.reason)
        if result.writes:
            parts = [
                f"{verb} {', '.join(items)}"
                for verb, items in (
                    ("created", result.created),
                    ("updated", result.updated),
                    ("deleted", result.deleted),
                )
                if items
            ]
            self.events.emit(body, "Normal", "Applied", "; ".join(parts))
            for verb, items in (
                ("create", result.created),
                ("update", result.updated),
                ("delete", result.deleted),
            ):
                for item in items:
                    m.API_WRITES.labels(verb=verb, kind=item.split("/", 1)[0]).inc()

    def _write_status(self, body: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> bool:
        if _normalised(old) == _normalised(new):
            return False
        patch = {"status": {**{k: None for k in old if k not in new}, **new}}
        meta = body["metadata"]
        self.applier.resource(f"{API_GROUP}/{API_VERSION}", "LLMDeployment").status.patch(
            body=patch,
            name=meta["name"],
            namespace=meta["namespace"],
            content_type="application/merge-patch+json",
        )
        m.API_WRITES.labels(verb="patch", kind="LLMDeployment/status").inc()
        return True


def _is_router(obj: dict[str, Any]) -> bool:
    """The router's Deployment and pods share the children's labels but are no engine."""
    labels = obj["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/component") == COMPONENT_ROUTER


def _normalised(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if v is not None}
