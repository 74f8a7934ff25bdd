"""The adapters mark on each LoRA engine pod (reconcile/llmdeployment/adapter_marks.py): it names
exactly the adapters the pod's engine serves, drops one before it is unloaded, and never names one
that failed to load there, against a fake of vLLM's runtime LoRA API."""

from __future__ import annotations

from typing import Any

import pytest
from adapterfakes import FakeEngines, pod
from kubernetes.client.exceptions import ApiException

from llmfleet.reconcile.llmdeployment.adapter_marks import (
    current_marks,
    mark_condition,
    marked,
    marks_to_write,
    serving,
    withdrawn,
    write_marks,
)
from llmfleet.reconcile.llmdeployment.adapters import AdapterSync, EngineOutcome, Wanted
from llmfleet.render.names import ADAPTERS_MARK

SQL = Wanted("sql", "/adapters/sql")
CHAT = Wanted("chat", "org/chat-lora")
BROKEN = "/adapters/broken"


def with_mark(p: dict[str, Any], *names: str) -> dict[str, Any]:
    p["status"]["conditions"].append(mark_condition(names))
    return p


def frozen(**marks: list[str] | None) -> dict[str, frozenset[str] | None]:
    return {k: None if v is None else frozenset(v) for k, v in marks.items()}


@pytest.mark.parametrize(
    ("names", "status", "message"),
    [
        (["sql"], "True", "sql"),
        (["sql", "chat", "sql"], "True", "chat,sql"),
        ([], "False", ""),
    ],
    ids=["one", "sorted-and-unique", "none"],
)
def test_a_mark_reads_back_as_the_adapters_it_was_written_with(
    names: list[str], status: str, message: str
) -> None:
    condition = mark_condition(names)
    assert (condition["type"], condition["status"], condition["message"]) == (
        ADAPTERS_MARK,
        status,
        message,
    )
    assert marked({"status": {"conditions": [condition]}}) == frozenset(names)


def test_a_pod_without_a_mark_reads_as_unmarked_not_as_serving_nothing() -> None:
    assert marked(pod("p1", "127.0.9.1")) is None


@pytest.mark.parametrize(
    ("marks", "serves", "writes"),
    [
        # engines that answered: the mark follows what each holds
        (frozen(p1=None), {"p1": ["sql"]}, {"p1": ["sql"]}),
        (frozen(p1=None), {"p1": []}, {"p1": []}),
        (frozen(p1=["sql"]), {"p1": ["sql"]}, {}),
        (frozen(p1=["sql", "chat"]), {"p1": ["chat"]}, {"p1": ["chat"]}),
        (frozen(p1=["sql"]), {"p1": ["sql", "chat"]}, {"p1": ["sql", "chat"]}),
        # an engine that did not answer (or a pod not serving): a mark naming adapters is emptied
        (frozen(p1=["sql"]), {}, {"p1": []}),
        (frozen(p1=[]), {}, {}),
        (frozen(p1=None), {}, {}),
        # two engines, the adapter failed on the second: only the first names it
        (frozen(p1=None, p2=None), {"p1": ["sql"], "p2": []}, {"p1": ["sql"], "p2": []}),
    ],
    ids=[
        "first-mark",
        "first-mark-empty",
        "in-step-no-write",
        "unloaded-leaves-mark",
        "loaded-joins-mark",
        "engine-not-answering",
        "already-empty-no-write",
        "never-marked-no-write",
        "failed-on-one-engine",
    ],
)
def test_marks_are_written_only_where_they_differ_from_what_the_engine_serves(
    marks: dict[str, frozenset[str] | None],
    serves: dict[str, list[str]],
    writes: dict[str, list[str]],
) -> None:
    got = marks_to_write(marks, {k: frozenset(v) for k, v in serves.items()})
    assert got == {k: frozenset(v) for k, v in writes.items()}


@pytest.mark.parametrize(
    ("marks", "staying", "writes"),
    [
        (frozen(p1=["sql", "chat"]), {"p1": ["sql", "chat"]}, {}),
        (frozen(p1=["sql", "chat"]), {"p1": ["chat"]}, {"p1": ["chat"]}),
        # the operator knows nothing the engine holds (it restarted): nothing stays
        (frozen(p1=["sql"]), {}, {"p1": []}),
        (frozen(p1=None, p2=[]), {}, {}),
    ],
    ids=["all-stay", "one-leaves", "engine-unknown", "unmarked-untouched"],
)
def test_before_a_sync_a_mark_drops_what_is_about_to_be_unloaded(
    marks: dict[str, frozenset[str] | None],
    staying: dict[str, list[str]],
    writes: dict[str, list[str]],
) -> None:
    got = withdrawn(marks, {k: frozenset(v) for k, v in staying.items()})
    assert got == {k: frozenset(v) for k, v in writes.items()}


def test_serving_counts_only_engines_that_answered() -> None:
    outcomes = [
        EngineOutcome("p1", frozenset({"sql"}), {}, complete=True),
        EngineOutcome("p2", frozenset(), {"sql": "no such adapter"}, complete=True),
        EngineOutcome("p3", frozenset(), {}, complete=False),  # not answering yet
    ]
    assert serving(outcomes) == {"p1": frozenset({"sql"}), "p2": frozenset()}


def converge(
    s: AdapterSync, wanted: tuple[Wanted, ...], pods: list[dict[str, Any]]
) -> dict[str, frozenset[str] | None]:
    """One reconcile's marks as the controller writes them: withdrawn, sync, then what loaded."""
    marks = current_marks(pods)
    marks |= withdrawn(marks, s.staying("ns", "llmd", wanted, pods))
    outcomes = s.sync("ns", "llmd", wanted, pods)
    return marks | marks_to_write(marks, serving(outcomes))


def names(marks: dict[str, frozenset[str] | None]) -> dict[str, list[str] | None]:
    return {k: None if v is None else sorted(v) for k, v in marks.items()}


def test_an_adapter_that_fails_on_one_engine_is_marked_only_on_the_other() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    pods = [pod("p1", "127.0.9.1"), pod("p2", "127.0.9.2")]
    converge(s, (SQL,), pods)
    # The same adapter, now from a source the second engine cannot read.
    moved = Wanted("sql", BROKEN)
    engines.refuse[BROKEN] = "No adapter found"
    engines.loaded["127.0.9.1"]["sql"] = BROKEN  # loaded there before the source broke
    s = AdapterSync(8000, engines)
    assert names(converge(s, (moved,), pods)) == {"p1": ["sql"], "p2": []}


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ((CHAT,), {"p1": ["chat"]}),  # sql removed from spec.adapters
        ((Wanted("sql", "/adapters/sql-v2"), CHAT), {"p1": ["chat", "sql"]}),  # reloaded
        ((Wanted("sql", BROKEN), CHAT), {"p1": ["chat"]}),  # the new source fails
    ],
    ids=["removed", "source-changed", "source-changed-and-fails"],
)
def test_an_edit_of_spec_adapters_leaves_the_mark_before_the_unload(
    after: tuple[Wanted, ...], expected: dict[str, list[str]]
) -> None:
    engines = FakeEngines(refuse={BROKEN: "No adapter found"})
    s = AdapterSync(8000, engines)
    p1 = pod("p1", "127.0.9.1")
    assert names(converge(s, (SQL, CHAT), [p1])) == {"p1": ["chat", "sql"]}
    marked_p1 = with_mark(pod("p1", "127.0.9.1"), "chat", "sql")
    marks = current_marks([marked_p1])
    early = withdrawn(marks, s.staying("ns", "llmd", after, [marked_p1]))
    # Withdrawn before any unload call reached the engine.
    assert early == {"p1": frozenset({"chat"})}
    assert engines.loaded["127.0.9.1"].keys() == {"sql", "chat"}
    assert names(converge(s, after, [marked_p1])) == expected


def test_a_restarted_engine_loses_its_mark_until_its_adapters_are_loaded_again() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    converge(s, (SQL,), [pod("p1", "127.0.9.1")])
    engines.loaded["127.0.9.1"] = {}  # the engine restarted: vLLM holds nothing
    engines.down.add("127.0.9.1")  # and does not answer yet
    restarted = with_mark(pod("p1", "127.0.9.1", restarts=1), "sql")
    assert names(converge(s, (SQL,), [restarted])) == {"p1": []}
    engines.down.clear()
    assert names(converge(s, (SQL,), [restarted])) == {"p1": ["sql"]}


class FakeCore:
    def __init__(self, gone: set[str]) -> None:
        self.gone = gone
        self.patched: dict[str, dict[str, Any]] = {}

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any) -> None:
        if name in self.gone:
            raise ApiException(status=404)
        self.patched[name] = body


def test_marks_are_patched_as_pod_conditions_and_a_pod_that_is_gone_is_skipped() -> None:
    core = FakeCore(gone={"p2"})
    write_marks(core, "ns", {"p1": frozenset({"sql"}), "p2": frozenset()})  # type: ignore[arg-type]
    assert core.patched == {"p1": {"status": {"conditions": [mark_condition(["sql"])]}}}


def test_an_api_error_other_than_gone_is_raised() -> None:
    class Refusing(FakeCore):
        def patch_namespaced_pod_status(self, name: str, namespace: str, body: Any) -> None:
            raise ApiException(status=403)

    with pytest.raises(ApiException):
        write_marks(Refusing(set()), "ns", {"p1": frozenset()})  # type: ignore[arg-type]
