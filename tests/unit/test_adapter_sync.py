"""Converging each engine's LoRA adapters on spec.adapters (reconcile/llmdeployment/adapters.py) and
what status says of them (reconcile/llmdeployment/adapter_status.py), against a fake of vLLM's
runtime LoRA API."""

from __future__ import annotations

from typing import Any

import pytest
from adapterfakes import FakeEngines, pod

from llmfleet.reconcile.llmdeployment.adapter_status import adapter_report
from llmfleet.reconcile.llmdeployment.adapters import (
    AdapterSync,
    Endpoint,
    EngineOutcome,
    HttpEngineApi,
    Wanted,
    gates_to_open,
    lora_engines,
)
from llmfleet.render.names import ADAPTERS_GATE

A = Wanted("sql", "/adapters/sql")
B = Wanted("chat", "org/chat-lora")


def sync(
    engines: FakeEngines, s: AdapterSync, wanted: tuple[Wanted, ...], *pods: dict[str, Any]
) -> tuple[EngineOutcome, ...]:
    return s.sync("ns", "llmd", wanted, list(pods))


def test_each_engine_gets_the_wanted_adapters_and_loses_the_rest() -> None:
    engines = FakeEngines()
    engines.loaded["127.0.9.1"] = {"old": "/adapters/old"}
    s = AdapterSync(8000, engines)
    out = sync(engines, s, (A, B), pod("p1", "127.0.9.1"), pod("p2", "127.0.9.2"))
    assert engines.loaded == {
        "127.0.9.1": {"sql": A.source, "chat": B.source},
        "127.0.9.2": {"sql": A.source, "chat": B.source},
    }
    assert [(o.pod, sorted(o.loaded), o.complete) for o in out] == [
        ("p1", ["chat", "sql"], True),
        ("p2", ["chat", "sql"], True),
    ]


def test_an_unchanged_spec_makes_no_call_to_an_engine_already_in_step() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    engines.calls.clear()
    sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    assert engines.calls == []


def test_removing_an_adapter_unloads_it_and_keeps_the_other() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    sync(engines, s, (A, B), pod("p1", "127.0.9.1"))
    engines.calls.clear()
    sync(engines, s, (B,), pod("p1", "127.0.9.1"))
    assert engines.calls == [("unload", "127.0.9.1", "sql")]
    assert engines.loaded["127.0.9.1"] == {"chat": B.source}


def test_a_new_source_under_the_same_name_is_reloaded() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    sync(engines, s, (Wanted("sql", "/adapters/sql-v2"),), pod("p1", "127.0.9.1"))
    assert engines.loaded["127.0.9.1"] == {"sql": "/adapters/sql-v2"}


def test_a_restarted_engine_is_asked_again_and_reloaded() -> None:
    engines = FakeEngines()
    s = AdapterSync(8000, engines)
    sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    engines.loaded["127.0.9.1"] = {}  # the container restarted: vLLM forgot its adapters
    sync(engines, s, (A,), pod("p1", "127.0.9.1", restarts=1))
    assert engines.loaded["127.0.9.1"] == {"sql": A.source}


def test_a_refused_adapter_is_reported_and_not_retried_at_once() -> None:
    engines = FakeEngines(refuse={B.source: "LoRA rank 32 is greater than max_lora_rank 16."})
    s = AdapterSync(8000, engines)
    (out,) = sync(engines, s, (A, B), pod("p1", "127.0.9.1"))
    assert out.loaded == {"sql"}
    assert out.complete
    assert out.failed == {"chat": "LoRA rank 32 is greater than max_lora_rank 16."}
    engines.calls.clear()
    (again,) = sync(engines, s, (A, B), pod("p1", "127.0.9.1"))
    assert engines.calls == []
    assert again.failed == out.failed


def test_an_engine_that_does_not_answer_is_left_for_the_next_reconcile() -> None:
    engines = FakeEngines()
    engines.down.add("127.0.9.1")
    s = AdapterSync(8000, engines)
    (out,) = sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    assert not out.complete
    assert not out.loaded
    engines.down.clear()
    (out,) = sync(engines, s, (A,), pod("p1", "127.0.9.1"))
    assert out.loaded == {"sql"}


@pytest.mark.parametrize(
    ("change", "counted"),
    [
        ({}, True),
        ({"args": ["--model", "m"]}, False),
        ({"deleting": True}, False),
        ({"containers_ready": "False"}, False),
    ],
    ids=["lora-engine", "without-enable-lora", "being-deleted", "not-answering-yet"],
)
def test_which_pods_count_as_lora_engines(change: dict[str, Any], counted: bool) -> None:
    p = pod("p1", "127.0.9.1")
    if "args" in change:
        p["spec"]["containers"][0]["args"] = change["args"]
    if change.get("deleting"):
        p["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    if "containers_ready" in change:
        p["status"]["conditions"][0]["status"] = change["containers_ready"]
    assert (lora_engines([p], "vllm") == [p]) is counted


def test_the_gate_opens_once_every_adapter_was_tried_even_a_refused_one() -> None:
    p1, p2, p3 = pod("p1", "127.0.9.1"), pod("p2", "127.0.9.2"), pod("p3", "127.0.9.3")
    p3["status"]["conditions"].append({"type": ADAPTERS_GATE, "status": "True"})
    outcomes = [
        EngineOutcome("p1", frozenset({"sql"}), {"chat": "refused"}, complete=True),
        EngineOutcome("p2", frozenset(), {}, complete=False),
        EngineOutcome("p3", frozenset({"sql"}), {}, complete=True),
    ]
    assert gates_to_open([p1, p2, p3], outcomes) == ["p1"]


@pytest.mark.parametrize(
    ("outcomes", "status", "reason", "words"),
    [
        (
            [EngineOutcome("p1", frozenset({"sql", "chat"}), {}, True)],
            "True",
            "AdaptersLoaded",
            "2 adapter(s) loaded on each of 1 engine(s)",
        ),
        (
            [
                EngineOutcome(
                    "p1",
                    frozenset({"sql"}),
                    {"chat": "LoRA rank 32 is greater than max_lora_rank 16."},
                    True,
                ),
            ],
            "False",
            "AdapterLoadFailed",
            "chat on 1 of 1 engines: LoRA rank 32 is greater than max_lora_rank 16. (raise "
            "spec.engine.lora.maxRank); the other 1 adapter(s) serve",
        ),
        (
            [
                EngineOutcome("p1", frozenset({"sql", "chat"}), {}, True),
                EngineOutcome("p2", frozenset({"sql"}), {}, False),
            ],
            "False",
            "AdaptersLoading",
            "chat (1 of 2 engines)",
        ),
        ([], "Unknown", "NoEngine", "no engine answers yet; its 2 adapter(s) load when one does"),
    ],
    ids=["all-loaded", "one-refused", "one-loading", "no-engine"],
)
def test_adapters_ready_sums_up_the_engines(
    outcomes: list[EngineOutcome], status: str, reason: str, words: str
) -> None:
    report = adapter_report((A, B), outcomes, generation=3)
    c = report.condition
    assert (c.type, c.status, c.reason, c.message) == ("AdaptersReady", status, reason, words)


def test_status_lists_each_adapter_with_its_engines_and_error() -> None:
    outcomes = [
        EngineOutcome(
            "p1", frozenset({"sql"}), {"chat": "No adapter found for org/chat-lora"}, True
        ),
        EngineOutcome(
            "p2", frozenset({"sql"}), {"chat": "No adapter found for org/chat-lora"}, True
        ),
    ]
    report = adapter_report((A, B), outcomes, generation=1)
    assert [(s.name, s.engines, s.of, s.error) for s in report.statuses] == [
        ("sql", 2, 2, None),
        (
            "chat",
            0,
            2,
            "No adapter found for org/chat-lora "
            "(spec.adapters[].source names nothing the engine can read)",
        ),
    ]


def test_vllm_s_wrapped_worker_error_reads_as_its_inner_reason() -> None:
    from llmfleet.reconcile.llmdeployment.adapters import _why

    text = (
        '{"error":{"message":"Call to add_lora method failed: Worker failed with error \'LoRA '
        "rank 32 is greater than max_lora_rank 16.', please check the stack trace above for "
        'the root cause","type":"InternalServerError","code":500}}'
    )
    assert _why(500, text) == "LoRA rank 32 is greater than max_lora_rank 16."
    assert HttpEngineApi().load(Endpoint("not-an-ip", 8000), "a", "/x") == "no address 'not-an-ip'"
