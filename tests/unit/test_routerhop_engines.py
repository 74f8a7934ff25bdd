"""Which engine the router hop sends a request for an adapter to: only a Ready, Running pod whose
`llmfleet.dev/adapters-serving` mark (as the operator writes it) names the adapter, the least
busy from this hop; none at all while no such pod exists."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from llmfleet.reconcile.llmdeployment.adapter_marks import mark_condition
from llmfleet.render.names import ADAPTERS_MARK
from llmfleet.routerhop.engines import ADAPTERS_MARK as HOP_MARK
from llmfleet.routerhop.engines import EngineTable


def pod(
    name: str,
    serving: list[str] | None,
    *,
    ready: bool = True,
    phase: str = "Running",
    ip: str | None = "10.0.0.1",
    deleting: bool = False,
) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if serving is not None:
        conditions.append(mark_condition(serving))  # exactly what the operator writes
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


CHOICES: dict[str, tuple[list[dict[str, Any]], str, set[str]]] = {
    # case: (pods, adapter, the engines it may reach)
    "marked-and-ready": ([pod("a", ["sql"]), pod("b", ["sql", "chat"])], "sql", {"a", "b"}),
    "only-the-engine-that-holds-it": ([pod("a", ["sql"]), pod("b", ["chat"])], "chat", {"b"}),
    "failed-there-so-unmarked": ([pod("a", ["sql"]), pod("b", [])], "sql", {"a"}),
    "no-mark-yet": ([pod("a", None), pod("b", ["sql"])], "sql", {"b"}),
    "loaded-nowhere": ([pod("a", ["chat"]), pod("b", [])], "sql", set()),
    "not-ready": ([pod("a", ["sql"], ready=False), pod("b", ["sql"])], "sql", {"b"}),
    "not-running": ([pod("a", ["sql"], phase="Pending"), pod("b", ["sql"])], "sql", {"b"}),
    "no-ip-yet": ([pod("a", ["sql"], ip=None), pod("b", ["sql"])], "sql", {"b"}),
    "draining": ([pod("a", ["sql"], deleting=True), pod("b", ["sql"])], "sql", {"b"}),
    "a-prefix-of-a-name-is-not-it": ([pod("a", ["sql-v2"])], "sql", set()),
}


@pytest.mark.parametrize(("pods", "adapter", "allowed"), CHOICES.values(), ids=CHOICES.keys())
def test_a_request_for_an_adapter_reaches_only_engines_marked_with_it(
    pods: list[dict[str, Any]], adapter: str, allowed: set[str]
) -> None:
    table = EngineTable(random.Random(1))
    table.replace(pods)
    reached = {table.choose(adapter) for _ in range(50)}
    expected: set[str | None] = set(allowed) or {None}
    assert {e.name if e else None for e in reached} == expected


def test_the_hop_reads_the_mark_the_operator_writes() -> None:
    assert HOP_MARK == ADAPTERS_MARK


def test_watch_events_move_the_choice() -> None:
    table = EngineTable(random.Random(1))
    table.replace([pod("a", [])])
    assert table.choose("sql") is None
    table.apply("MODIFIED", pod("a", ["sql"]))  # loaded, marked
    engine = table.choose("sql")
    assert engine is not None
    assert engine.name == "a"
    table.apply("MODIFIED", pod("a", []))  # withdrawn before an unload
    assert table.choose("sql") is None
    table.apply("ADDED", pod("b", ["sql"], ip="10.0.0.2"))
    engine = table.choose("sql")
    assert engine is not None
    assert (engine.name, engine.ip) == ("b", "10.0.0.2")
    table.apply("DELETED", pod("b", ["sql"]))
    assert table.choose("sql") is None


def test_the_least_busy_engine_gets_the_next_request_and_ties_spread() -> None:
    table = EngineTable(random.Random(7))
    table.replace([pod("a", ["sql"]), pod("b", ["sql"]), pod("c", ["sql"])])
    busy = table.choose("sql")
    assert busy is not None
    table.started(busy)
    table.started(busy)
    picks = Counter(e.name for e in (table.choose("sql") for _ in range(300)) if e)
    assert busy.name not in picks
    assert len(picks) == 2
    assert min(picks.values()) > 100  # random among the idle two
    table.finished(busy)
    table.finished(busy)
    assert len({e.name for e in (table.choose("sql") for _ in range(300)) if e}) == 3


def test_an_engine_already_tried_is_skipped() -> None:
    table = EngineTable(random.Random(1))
    table.replace([pod("a", ["sql"]), pod("b", ["sql"])])
    engine = table.choose("sql", exclude=frozenset({"a"}))
    assert engine is not None
    assert engine.name == "b"
    assert table.choose("sql", exclude=frozenset({"a", "b"})) is None
