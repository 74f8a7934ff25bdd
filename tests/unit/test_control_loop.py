"""One control loop per kind (llmfleet.reconcile.machinery.loop, manager, main): kopf's handlers
only enqueue, an event that changes no generation (the operator's own status write) enqueues
nothing, requests for one resource from every source fold into one reconcile, a failure is retried
by the queue after the resource's backoff, and an invalid spec waits for the user's next change."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import kopf
import pytest
from kubernetes import client as k8s

from llmfleet import main
from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL
from llmfleet.planner import Plan
from llmfleet.reconcile import manager as manager_module
from llmfleet.reconcile.machinery import base
from llmfleet.reconcile.machinery.apply import ApplyResult
from llmfleet.reconcile.machinery.base import MIN_RETRY
from llmfleet.reconcile.machinery.loop import GenerationFilter
from llmfleet.reconcile.machinery.workqueue import Backoff
from llmfleet.reconcile.manager import Manager
from llmfleet.render.batchjob import BATCHJOB_LABEL
from llmfleet.render.names import DEPLOYMENT_LABEL
from llmfleet.settings import OperatorSettings

NS = "loop-test"
KEY = (NS, "chat")
VALID = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}


class FakeApiError(Exception):
    """A conflict: transient, retried, never a refusal."""

    status = 409


class View:
    def __init__(self, *_a: Any, **_k: Any) -> None:
        pass

    def wait_synced(self, _timeout: float) -> bool:
        return True

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def dead(self) -> list[str]:
        return []


class Store:
    """The LLMDeployment as the API server holds it: what a reconcile GETs, and its status
    writes."""

    def __init__(self) -> None:
        self.spec: dict[str, Any] = dict(VALID)
        self.generation = 1
        self.reads = 0
        self.status_writes: list[dict[str, Any]] = []
        self.status = self

    def get(self, _v: str, _k: str, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        meta = {"namespace": namespace, "name": name, "uid": "u1", "generation": self.generation}
        return {"metadata": meta, "spec": self.spec}

    def resource(self, _v: str, _k: str) -> Store:
        return self

    def patch(self, *, body: dict[str, Any], **_kw: Any) -> None:
        self.status_writes.append(body)


class QuietEvents:
    def emit(self, *_a: Any) -> None: ...


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch, store: Store) -> Iterator[Manager]:
    """The operator's loops around its real reconcilers; the API server is `store`, and a
    reconcile's work on a planned spec is each test's `run`."""
    monkeypatch.setattr(manager_module.ChildView, "of_children", View)
    monkeypatch.setattr(base, "Applier", lambda _api, _view: store)
    running = Manager(k8s.ApiClient(), OperatorSettings(), DEFAULT_GPU_PROFILES, None)
    for reconciler in (running.deployments, running.batch):
        reconciler.events = QuietEvents()  # type: ignore[assignment]
    planned: Plan = object()  # type: ignore[assignment]
    running.deployments.plan = lambda _spec, _ns: planned  # type: ignore[method-assign]
    yield running
    for loop in running.loops.values():
        loop.queue.stop()
        loop.queue.join(5)


def run_with(fleet: Manager, run: Callable[..., ApplyResult]) -> list[float]:
    """Reconciles of LLMDeployments do `run`; when each ran (monotonic)."""
    ran: list[float] = []

    def recorded(*args: Any) -> ApplyResult:
        ran.append(time.monotonic())
        return run(*args)

    fleet.deployments.run = recorded  # type: ignore[method-assign]
    return ran


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def body(generation: int = 1, uid: str = "u1", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": "chat", "uid": uid, "generation": generation, **meta},
        "spec": VALID,
        "status": {"phase": "Ready"},
    }


def kopf_handler(plural: str) -> Callable[..., Any]:
    registry = kopf.OperatorRegistry()
    main.install(registry)
    (found,) = [h for h in registry._watching.get_all_handlers() if h.id == f"enqueue-{plural}"]
    return found.fn  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("plural", "label", "other"),
    [(PLURAL, DEPLOYMENT_LABEL, BATCHJOB_LABEL), (BATCH_PLURAL, BATCHJOB_LABEL, DEPLOYMENT_LABEL)],
    ids=["llmdeployment", "llmbatchjob"],
)
def test_a_kopf_handler_only_enqueues_the_key_into_its_kinds_queue(
    fleet: Manager, store: Store, plural: str, label: str, other: str
) -> None:
    handler = kopf_handler(plural)
    handler(event={"type": "ADDED"}, body=body(), memo=kopf.Memo(manager=fleet))
    assert (len(fleet.loops[label].queue), len(fleet.loops[other].queue)) == (1, 0)
    # Nothing read or written on kopf's thread: the queue's workers (not started) do that.
    assert (store.reads, store.status_writes) == (0, [])


LISTED = (None, body())
EVENTS: dict[str, tuple[list[tuple[str | None, dict[str, Any]]], bool]] = {
    "first-sight-at-start": ([LISTED], True),
    "created": ([("ADDED", body())], True),
    "status-written": ([LISTED, ("MODIFIED", {**body(), "status": {"phase": "Failed"}})], False),
    "annotated": ([LISTED, ("MODIFIED", body(annotations={"team": "search"}))], False),
    "relisted-unchanged": ([LISTED, (None, body())], False),
    "spec-changed": ([LISTED, ("MODIFIED", body(generation=2))], True),
    "deletion-began": (
        [LISTED, ("MODIFIED", body(deletionTimestamp="2026-11-27T00:00:00Z"))],
        True,
    ),
    "deleted": ([LISTED, ("DELETED", body())], True),
    "recreated-same-name": ([LISTED, ("ADDED", body(uid="u2"))], True),
    "recreated-after-delete": ([LISTED, ("DELETED", body()), ("ADDED", body())], True),
}


@pytest.mark.parametrize(("events", "enqueued"), list(EVENTS.values()), ids=list(EVENTS))
def test_only_a_new_object_generation_or_deletion_enqueues_a_reconcile(
    events: list[tuple[str | None, dict[str, Any]]], enqueued: bool
) -> None:
    heard = GenerationFilter()
    *before, (event_type, last) = events
    for earlier_type, earlier in before:
        heard.admits(earlier_type, earlier)
    assert heard.admits(event_type, last) is enqueued


def test_the_operators_own_status_write_does_not_reconcile_again(fleet: Manager) -> None:
    ran = run_with(fleet, lambda *_a: ApplyResult(unchanged=1))
    handler = kopf_handler(PLURAL)
    memo = kopf.Memo(manager=fleet)
    fleet.loops[DEPLOYMENT_LABEL].queue.start()
    handler(event={"type": None}, body=body(), memo=memo)
    wait_for(lambda: len(ran) == 1)
    handler(event={"type": "MODIFIED"}, body={**body(), "status": {"phase": "Pending"}}, memo=memo)
    time.sleep(0.2)
    assert len(ran) == 1
    handler(event={"type": "MODIFIED"}, body=body(generation=2), memo=memo)
    wait_for(lambda: len(ran) == 2)


def test_requests_from_every_source_for_one_resource_fold_into_one_reconcile(
    fleet: Manager,
) -> None:
    ran = run_with(fleet, lambda *_a: ApplyResult(unchanged=1))
    loop = fleet.loops[DEPLOYMENT_LABEL]
    kopf_handler(PLURAL)(event={"type": None}, body=body(), memo=kopf.Memo(manager=fleet))
    child = {
        "metadata": {"namespace": NS, "name": "chat-engine", "labels": {DEPLOYMENT_LABEL: "chat"}}
    }
    fleet._changed(child)  # a child informer
    loop.enqueue_periodic(*KEY)  # the resync
    loop.queue.start()
    wait_for(lambda: len(ran) == 1 and len(loop.queue) == 0)
    time.sleep(0.2)
    assert len(ran) == 1


def test_a_failing_reconcile_is_retried_by_its_queue_after_the_resources_backoff(
    fleet: Manager,
) -> None:
    failures_seen: list[int] = []

    def fails_twice(*_a: Any) -> ApplyResult:
        failures_seen.append(fleet.deployments.backoff.failures(KEY))
        if len(failures_seen) <= 2:
            raise FakeApiError
        return ApplyResult(unchanged=1)

    fleet.deployments.backoff = Backoff(first=0.2)
    ran = run_with(fleet, fails_twice)
    loop = fleet.loops[DEPLOYMENT_LABEL]
    loop.enqueue(*KEY)
    loop.queue.start()
    wait_for(lambda: len(ran) == 3)
    assert failures_seen == [0, 1, 2]
    assert all(b - a >= MIN_RETRY for a, b in itertools.pairwise(ran))
    time.sleep(MIN_RETRY * 2)
    assert (len(ran), fleet.deployments.backoff.failures(KEY)) == (3, 0)  # done: not run again


def test_the_resync_leaves_a_resource_waiting_out_its_backoff_alone(fleet: Manager) -> None:
    loop = fleet.loops[DEPLOYMENT_LABEL]
    fleet.deployments.backoff.failed(KEY, retry_after=60)
    loop.enqueue_periodic(*KEY)
    assert len(loop.queue) == 0
    fleet.deployments.backoff.succeeded(KEY)
    loop.enqueue_periodic(*KEY)
    assert len(loop.queue) == 1


def test_an_invalid_spec_is_not_retried_until_its_next_generation(
    fleet: Manager, store: Store
) -> None:
    store.spec = {"nonsense": True}
    handler = kopf_handler(PLURAL)
    memo = kopf.Memo(manager=fleet)
    fleet.loops[DEPLOYMENT_LABEL].queue.start()
    handler(event={"type": None}, body=body(), memo=memo)
    wait_for(lambda: store.reads == 1 and len(fleet.loops[DEPLOYMENT_LABEL].queue) == 0)
    refused = [w["status"]["conditions"] for w in store.status_writes]
    time.sleep(1.2)  # longer than any retry the queue would schedule (NotSynced: 1 s)
    assert store.reads == 1
    # Its own status write comes back as an event, and enqueues nothing.
    handler(event={"type": "MODIFIED"}, body=body(), memo=memo)
    time.sleep(0.1)
    assert store.reads == 1
    store.generation = 2
    handler(event={"type": "MODIFIED"}, body=body(generation=2), memo=memo)
    wait_for(lambda: store.reads == 2)
    assert any(c["reason"] == "InvalidSpec" for c in refused[0])
