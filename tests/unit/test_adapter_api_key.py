"""The operator's calls to the LoRA API of engines behind spec.engine.apiKeySecretRef, against a
real HTTP server on 127.0.0.1 that guards its /v1 paths as vLLM 0.32 does
(vllm/entrypoints/serve/middleware/authenticate.py): 401 {"error": "Unauthorized"} unless the
request carries `Authorization: Bearer <key>`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from adapterfakes import pod

from llmfleet.reconcile.llmdeployment.adapter_status import adapter_report
from llmfleet.reconcile.llmdeployment.adapters import AdapterSync, Endpoint, HttpEngineApi, Wanted
from llmfleet.reconcile.machinery.secrets import BearerToken

KEY = "sk-team-a-7f3c"
SQL = Wanted("sql", "/adapters/sql")


@dataclass
class Engine:
    """What the stand-in holds and was asked: (method, path, Authorization header) per call."""

    key: str | None
    port: int = 0
    loaded: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    redirect_to: str = ""  # answer every call with a 307 to this URL instead

    @property
    def at(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port)


@contextmanager
def engine(key: str | None = KEY) -> Iterator[Engine]:
    state = Engine(key)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _guarded(self) -> bool:
            """vLLM's middleware: every /v1 path wants the key, compared whole."""
            state.calls.append((self.command, self.path, self.headers.get("Authorization")))
            if state.redirect_to:
                self.send_response(307)
                self.send_header("Location", state.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if state.key and (scheme.lower() != "bearer" or token != state.key):
                self._answer(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:
            if self._guarded():
                adapters = [{"id": n, "root": s, "parent": "tiny"} for n, s in state.loaded.items()]
                self._answer(
                    200, {"data": [{"id": "tiny", "root": "/m", "parent": None}, *adapters]}
                )

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self._guarded():
                return
            if self.path == "/v1/load_lora_adapter":
                state.loaded[body["lora_name"]] = body["lora_path"]
            else:
                state.loaded.pop(body["lora_name"], None)
            self._answer(200, {})

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    threading.Thread(
        target=server.serve_forever, args=(0.05,), name="vllm-like", daemon=True
    ).start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def with_key(at: Endpoint, key: str | None) -> Endpoint:
    return Endpoint(at.ip, at.port, None if key is None else BearerToken(key))


def test_every_call_carries_the_key_as_vllm_wants_it_and_succeeds() -> None:
    api = HttpEngineApi()
    with engine() as e:
        at = with_key(e.at, KEY)
        assert api.load(at, "sql", "/adapters/sql") is None
        assert api.adapters(at) == {"sql": "/adapters/sql"}
        assert api.unload(at, "sql") is None
        assert api.adapters(at) == {}

    assert [(method, path) for method, path, _ in e.calls] == [
        ("POST", "/v1/load_lora_adapter"),
        ("GET", "/v1/models"),
        ("POST", "/v1/unload_lora_adapter"),
        ("GET", "/v1/models"),
    ]
    assert {auth for _, _, auth in e.calls} == {f"Bearer {KEY}"}


def test_an_engine_without_a_key_is_called_without_the_header() -> None:
    with engine(key=None) as e:
        assert HttpEngineApi().load(e.at, "sql", "/adapters/sql") is None

    assert [auth for _, _, auth in e.calls] == [None]


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        pytest.param(
            None,
            "the engine wants an API key and the operator has none: give the key with "
            "spec.engine.apiKeySecretRef",
            id="no-key-sent",
        ),
        pytest.param(
            "sk-old",
            "the engine refused the key of spec.engine.apiKeySecretRef: an engine reads it when "
            "it starts, so one started before the Secret changed wants the old key",
            id="another-key-sent",
        ),
    ],
)
def test_an_engine_that_refuses_the_key_says_so_on_every_call(sent: str | None, said: str) -> None:
    api = HttpEngineApi()
    with engine() as e:
        at = with_key(e.at, sent)
        answers = [api.adapters(at), api.load(at, "sql", "/x"), api.unload(at, "sql")]

    assert all(str(a).startswith(said) for a in answers), answers
    assert e.loaded == {}


def test_the_key_does_not_follow_a_redirect_to_another_address() -> None:
    # The operator follows no redirect from a pod (reconcile/machinery/podcall.py): nothing is sent
    # there.
    with engine() as elsewhere, engine() as e:
        e.redirect_to = f"http://127.0.0.1:{elsewhere.port}"
        listed = HttpEngineApi().adapters(with_key(e.at, KEY))

    assert [auth for _, _, auth in e.calls] == [f"Bearer {KEY}"]
    assert elsewhere.calls == []
    assert not isinstance(listed, dict)


def test_adapters_load_into_an_engine_behind_a_key_and_status_says_so() -> None:
    with engine() as e:
        e.loaded["stale"] = "/adapters/stale"  # what the previous spec left in the engine
        outcomes = AdapterSync(e.port).sync(
            "ns", "llmd", (SQL,), [pod("p1", "127.0.0.1")], BearerToken(KEY)
        )

    assert e.loaded == {"sql": "/adapters/sql"}
    condition = adapter_report((SQL,), outcomes, generation=1).condition
    assert (condition.status, condition.reason) == ("True", "AdaptersLoaded")


def test_an_engine_refusing_the_key_keeps_its_gate_shut_and_names_the_field() -> None:
    with engine() as e:
        outcomes = AdapterSync(e.port).sync(
            "ns", "llmd", (SQL,), [pod("p1", "127.0.0.1")], BearerToken("sk-old")
        )

    (outcome,) = outcomes
    assert not outcome.complete
    condition = adapter_report((SQL,), outcomes, generation=1).condition
    assert (condition.status, condition.reason) == ("False", "AdapterLoadFailed")
    assert "the engine refused the key of spec.engine.apiKeySecretRef" in condition.message
