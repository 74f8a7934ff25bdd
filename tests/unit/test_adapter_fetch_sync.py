"""Adapters the pod's fetcher copies in (s3://, gs://, a Hub repo at a revision): the operator
asks the fetcher, then loads the local copy into vLLM, reports the fetcher's refusal by name,
prunes copies no adapter needs, and knows a copy after its own restart by its path."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapterfakes import FakeEngines, pod

from llmfleet.fetcher.paths import FETCH_ROOT, fetched_path
from llmfleet.reconcile.llmdeployment.adapters import AdapterSync, EngineOutcome, Wanted
from llmfleet.reconcile.llmdeployment.fetching import NO_FETCHER
from llmfleet.reconcile.machinery.secrets import BearerToken

S3 = Wanted("sql", "s3://team/sql")
REV = Wanted("chat", "org/chat-lora", "v2")
LOCAL = Wanted("tool", "/adapters/tool")
IP = "127.0.9.1"
TOKEN = BearerToken("fetcher-token")


class FakeFetcher:
    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        self.refuse = refuse or {}
        self.calls: list[tuple[str, ...]] = []

    def fetch(self, ip: str, token: BearerToken, source: str, revision: str | None) -> str | None:
        assert token == TOKEN  # the LLMDeployment's, on every call
        self.calls.append(("fetch", ip, source, revision or ""))
        return self.refuse.get(source)

    def prune(self, ip: str, token: BearerToken, keep: Iterable[str]) -> None:
        assert token == TOKEN
        self.calls.append(("prune", ip, *sorted(keep)))


def sync(
    engines: FakeEngines, s: AdapterSync, wanted: tuple[Wanted, ...], *pods: dict[str, Any]
) -> tuple[EngineOutcome, ...]:
    return s.sync("ns", "llmd", wanted, list(pods), fetcher_token=TOKEN)


def with_fetcher(name: str, ip: str = IP) -> dict[str, Any]:
    p = pod(name, ip)
    p["spec"]["containers"].append({"name": "adapter-fetcher"})
    return p


def test_an_object_store_adapter_is_fetched_then_its_copy_loaded_once() -> None:
    engines, fetcher = FakeEngines(), FakeFetcher()
    s = AdapterSync(8000, engines, fetcher)
    (out,) = sync(engines, s, (S3, REV, LOCAL), with_fetcher("p1"))

    assert fetcher.calls == [
        ("fetch", IP, "org/chat-lora", "v2"),
        ("fetch", IP, "s3://team/sql", ""),
    ]
    assert engines.loaded[IP] == {
        "sql": fetched_path("s3://team/sql", None),
        "chat": fetched_path("org/chat-lora", "v2"),
        "tool": "/adapters/tool",
    }
    assert engines.loaded[IP]["sql"].startswith(f"{FETCH_ROOT}/")
    assert out.loaded == {"sql", "chat", "tool"}
    fetcher.calls.clear()
    engines.calls.clear()
    sync(engines, s, (S3, REV, LOCAL), with_fetcher("p1"))
    assert fetcher.calls == engines.calls == []


def test_a_fetch_the_store_refuses_is_reported_in_its_words_and_vllm_is_not_asked() -> None:
    why = "s3://team/sql: the object store refused the credentials (AWS_ACCESS_KEY_ID ...)"
    engines, fetcher = FakeEngines(), FakeFetcher(refuse={S3.source: why})
    s = AdapterSync(8000, engines, fetcher)
    (out,) = sync(engines, s, (S3, LOCAL), with_fetcher("p1"))

    assert out.failed == {"sql": why}
    assert out.loaded == {"tool"}
    assert out.complete  # a broken adapter does not keep the pod out of service
    assert ("load", IP, "sql") not in engines.calls


def test_an_engine_pod_without_a_fetcher_reports_why_and_serves_the_rest() -> None:
    engines, fetcher = FakeEngines(), FakeFetcher()
    s = AdapterSync(8000, engines, fetcher)
    (out,) = sync(engines, s, (S3, LOCAL), pod("leader", IP))

    assert out.failed == {"sql": NO_FETCHER}
    assert out.loaded == {"tool"}
    assert fetcher.calls == []


def test_removing_a_fetched_adapter_unloads_it_and_prunes_its_copy() -> None:
    engines, fetcher = FakeEngines(), FakeFetcher()
    s = AdapterSync(8000, engines, fetcher)
    sync(engines, s, (S3, REV), with_fetcher("p1"))
    fetcher.calls.clear()
    sync(engines, s, (REV,), with_fetcher("p1"))

    assert ("unload", IP, "sql") in engines.calls
    assert fetcher.calls == [("prune", IP, REV.path)]


def test_a_new_revision_is_fetched_and_loaded_in_place_of_the_old() -> None:
    engines, fetcher = FakeEngines(), FakeFetcher()
    s = AdapterSync(8000, engines, fetcher)
    sync(engines, s, (REV,), with_fetcher("p1"))
    v3 = Wanted("chat", "org/chat-lora", "v3")
    sync(engines, s, (v3,), with_fetcher("p1"))

    assert engines.loaded[IP] == {"chat": v3.path}
    # The old copy goes before the new one comes: at the fetcher's cap on count (or bytes) the
    # new revision would otherwise be refused while the old one still takes its place.
    assert fetcher.calls[-2:] == [
        ("prune", IP, v3.path),
        ("fetch", IP, "org/chat-lora", "v3"),
    ]


def test_after_an_operator_restart_a_loaded_copy_is_recognised_by_its_path() -> None:
    engines, fetcher = FakeEngines(), FakeFetcher()
    sync(engines, AdapterSync(8000, engines, fetcher), (S3,), with_fetcher("p1"))
    engines.calls.clear()
    fetcher.calls.clear()
    sync(engines, AdapterSync(8000, engines, fetcher), (S3,), with_fetcher("p1"))

    assert engines.calls == [("list", IP, "")]
    assert fetcher.calls == []
