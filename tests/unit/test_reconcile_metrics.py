"""The operator's metrics of its own work (llmfleet.metrics_reconcile), read as Prometheus would
serve them: reconciles and errors of each kind under its `kind` label, and each API write counted
once, by the writer that made it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.dynamic.exceptions import NotFoundError
from prometheus_client import REGISTRY

from llmfleet import metrics_reconcile as mr
from llmfleet.planner import Plan
from llmfleet.reconcile.llmbatchjob.batchjob import BatchJobController
from llmfleet.reconcile.llmdeployment.controller import Controller
from llmfleet.reconcile.machinery import apply as apply_module
from llmfleet.reconcile.machinery import base
from llmfleet.reconcile.machinery.apply import Applier, ApplyResult
from llmfleet.reconcile.machinery.base import InvalidSpecError, Reconciler
from llmfleet.reconcile.machinery.events import EventRecorder
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

NS = "metrics-kind-test"


def value(metric: str, /, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


class FakeApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


# --- reconciles by kind --------------------------------------------------------------------------


class FakeView:
    def wait_synced(self, _timeout: float) -> bool:
        return True


class StatusResource:
    def __init__(self) -> None:
        self.status = self
        self.patches: list[dict[str, Any]] = []

    def patch(self, *, body: dict[str, Any], **_kw: Any) -> None:
        self.patches.append(body)


class FakeApplier:
    """The resource's object as `get` returns it, and a status subresource that accepts."""

    def __init__(self, _api: Any, view: Any) -> None:
        self.view = view
        self.spec: dict[str, Any] = {}
        self.status = StatusResource()

    def get(self, _v: str, _k: str, namespace: str, name: str) -> dict[str, Any]:
        meta = {"namespace": namespace, "name": name, "uid": "u1", "generation": 1}
        return {"metadata": meta, "spec": self.spec}

    def resource(self, _v: str, _k: str) -> StatusResource:
        return self.status


class QuietEvents:
    def emit(self, *_a: Any) -> None:
        pass


def changed(*_a: Any) -> ApplyResult:
    return ApplyResult(created=["Job/x"])


def unchanged(*_a: Any) -> ApplyResult:
    return ApplyResult(unchanged=3)


def conflict(*_a: Any) -> ApplyResult:
    raise FakeApiError(409)


RUNS: dict[str, Callable[..., ApplyResult]] = {
    "changed": changed,
    "unchanged": unchanged,
    "error": conflict,
}
KINDS: dict[str, Callable[..., Reconciler[Any, Any]]] = {
    "LLMDeployment": lambda: Controller(k8s.ApiClient(), FLEET, view=FakeView()),  # type: ignore[arg-type]
    "LLMBatchJob": lambda: BatchJobController(k8s.ApiClient(), FLEET, view=FakeView()),  # type: ignore[arg-type]
}


@pytest.fixture
def make(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[str], Reconciler[Any, Any]]]:
    monkeypatch.setattr(base, "Applier", FakeApplier)
    made: list[tuple[str, str]] = []

    def build(kind: str) -> Reconciler[Any, Any]:
        r = KINDS[kind]()
        r.events = QuietEvents()  # type: ignore[assignment]
        made.append((kind, r.kind))
        return r

    yield build
    for kind, _ in made:
        mr.forget(kind, NS, "chat")


def run_once(r: Reconciler[Any, Any], outcome: str) -> None:
    planned: Plan = object()  # type: ignore[assignment]
    r.plan = lambda _spec, _ns: planned  # type: ignore[method-assign]
    if outcome == "invalid":
        r.applier.spec = {"nonsense": True}  # type: ignore[attr-defined]
    else:
        r.applier.spec = VALID[r.kind]  # type: ignore[attr-defined]
        r.run = RUNS[outcome]  # type: ignore[method-assign]
    with contextlib.suppress(InvalidSpecError, FakeApiError):
        r.reconcile(NS, "chat")


VALID = {
    "LLMDeployment": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
    "LLMBatchJob": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "input": {"configMap": {"name": "prompts", "key": "prompts.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "results", "path": "run-1"}},
    },
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("outcome", ["changed", "unchanged", "invalid", "error"])
def test_a_reconcile_counts_once_under_its_kind_and_result(
    make: Callable[[str], Reconciler[Any, Any]], kind: str, outcome: str
) -> None:
    r = make(kind)
    before = {
        (k, res): value("llmfleet_reconcile_total", kind=k, result=res)
        for k in KINDS
        for res in mr.RESULTS
    }
    timed = value("llmfleet_reconcile_duration_seconds_count", kind=kind)
    run_once(r, outcome)
    after = {key: value("llmfleet_reconcile_total", kind=key[0], result=key[1]) for key in before}
    moved = {key: after[key] - before[key] for key in before if after[key] != before[key]}
    assert moved == {(kind, outcome): 1.0}
    assert value("llmfleet_reconcile_duration_seconds_count", kind=kind) == timed + 1


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_error_is_counted_for_its_resource_and_kind_until_the_resource_is_gone(
    make: Callable[[str], Reconciler[Any, Any]], kind: str
) -> None:
    r = make(kind)
    labels = {"kind": kind, "namespace": NS, "name": "chat", "reason": "Conflict"}
    run_once(r, "error")
    run_once(r, "error")
    assert value("llmfleet_reconcile_errors_total", **labels) == 2
    for other in KINDS:
        if other != kind:
            assert value("llmfleet_reconcile_errors_total", **{**labels, "kind": other}) == 0
    r.applier.get = lambda *_a: None  # type: ignore[method-assign]
    r.reconcile(NS, "chat")
    assert REGISTRY.get_sample_value("llmfleet_reconcile_errors_total", labels) is None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_refused_spec_writes_its_status_once_and_counts_that_write(
    make: Callable[[str], Reconciler[Any, Any]], kind: str
) -> None:
    r = make(kind)
    before = value("llmfleet_api_writes_total", verb="patch", kind=f"{kind}/status")
    run_once(r, "invalid")
    assert len(r.applier.status.patches) == 1  # type: ignore[attr-defined]
    assert value("llmfleet_api_writes_total", verb="patch", kind=f"{kind}/status") == before + 1


def test_an_unknown_result_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="result: 'done' is none of changed, unchanged"):
        mr.count_reconcile("LLMDeployment", "done", 0.1)


# --- error reasons -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (FakeApiError(403), "Forbidden"),
        (FakeApiError(409), "Conflict"),
        (FakeApiError(422), "Invalid"),
        (FakeApiError(502), "ServerError"),
        (FakeApiError(418), "HTTP418"),
        (TimeoutError(), "Timeout"),
        (ConnectionRefusedError(), "Unreachable"),
        (KeyError("x"), "KeyError"),
    ],
)
def test_error_reason(error: BaseException, reason: str) -> None:
    assert mr.error_reason(error) == reason


# --- writes through the Applier and the EventRecorder --------------------------------------------


class FakeResource:
    def __init__(self, gone: bool) -> None:
        self.gone = gone

    def path(self, **_kw: Any) -> str:
        return "/apis/x"

    def delete(self, **_kw: Any) -> None:
        if self.gone:
            raise NotFoundError(k8s.ApiException(status=404))


class FakeResponse:
    def __init__(self, body: bytes) -> None:
        self.data = body


class FakeDynamic:
    gone = False

    def __init__(self, _api: Any) -> None:
        self.resources = self
        self.requests = 0

    def get(self, **_kw: Any) -> FakeResource:
        return FakeResource(self.gone)

    def request(self, _verb: str, _path: str, *, body: bytes, **_kw: Any) -> FakeResponse:
        self.requests += 1
        return FakeResponse(body)


class DictView:
    def __init__(self) -> None:
        self.live: dict[str, dict[str, Any]] = {}

    def get(self, _v: str, kind: str, _ns: str, name: str) -> dict[str, Any] | None:
        return self.live.get(f"{kind}/{name}")


CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "cm", "namespace": NS},
    "data": {"a": "1"},
}


def writes(verb: str, kind: str) -> float:
    return value("llmfleet_api_writes_total", verb=verb, kind=kind)


@pytest.fixture
def applier(monkeypatch: pytest.MonkeyPatch) -> tuple[Applier, DictView]:
    monkeypatch.setattr(apply_module, "DynamicClient", FakeDynamic)
    view = DictView()
    return Applier(k8s.ApiClient(), view), view  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("live", "verb", "counted"),
    [
        (None, "create", 1),
        ({**CONFIG_MAP, "data": {"a": "2"}}, "update", 1),
        ("same", "update", 0),
    ],
    ids=[
        "new-object-is-a-create",
        "changed-object-is-an-update",
        "unchanged-object-no-write",
    ],
)
def test_an_apply_is_counted_once_when_it_writes(
    applier: tuple[Applier, DictView], live: Any, verb: str, counted: int
) -> None:
    a, view = applier
    if live == "same":
        live = apply_module.with_hash(CONFIG_MAP)
    if live is not None:
        view.live["ConfigMap/cm"] = live
    before = {v: writes(v, "ConfigMap") for v in ("create", "update")}
    a.apply(CONFIG_MAP, ApplyResult())
    after = {v: writes(v, "ConfigMap") for v in ("create", "update")}
    assert after[verb] - before[verb] == counted
    assert sum(after.values()) - sum(before.values()) == counted
    assert a._dyn.requests == counted  # type: ignore[attr-defined]


@pytest.mark.parametrize(("gone", "counted"), [(False, 1), (True, 0)], ids=["deleted", "gone"])
def test_a_delete_is_counted_only_when_the_server_deleted(
    applier: tuple[Applier, DictView], gone: bool, counted: int
) -> None:
    a, _ = applier
    a._dyn.gone = gone  # type: ignore[attr-defined]
    before = writes("delete", "Job")
    assert a.delete("batch/v1", "Job", NS, "x") is not gone
    assert writes("delete", "Job") - before == counted


class FakeCore:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def create_namespaced_event(self, *_a: Any, **_kw: Any) -> None:
        if self.fail:
            raise k8s.ApiException(status=403, reason="Forbidden")


@pytest.mark.parametrize(("fail", "counted"), [(False, 1), (True, 0)], ids=["posted", "refused"])
def test_an_event_is_counted_when_the_server_took_it(fail: bool, counted: int) -> None:
    recorder = EventRecorder(k8s.ApiClient())
    recorder._core = FakeCore(fail)  # type: ignore[assignment]
    body = {
        "apiVersion": "llmfleet.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {"namespace": NS, "name": "chat", "uid": "u1"},
    }
    before = writes("create", "Event")
    recorder.emit(body, "Normal", "Planned", "why")
    assert writes("create", "Event") - before == counted
