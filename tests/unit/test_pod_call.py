"""Every call the operator makes to a pod goes through one client (reconcile/machinery/podcall.py):
to the pod's IP directly whatever HTTP_PROXY says, never to a name, never past a redirect, within a
timeout and a size cap. Real HTTP servers on 127.0.0.1 stand in for the pod and for a proxy."""

from __future__ import annotations

import ast
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llmfleet.reconcile.llmbatchjob import batchjob
from llmfleet.reconcile.llmdeployment import fetching, kvcache
from llmfleet.reconcile.llmdeployment.adapters import Endpoint, HttpEngineApi
from llmfleet.reconcile.machinery import podcall
from llmfleet.reconcile.machinery.podcall import PodCallError, call, pod_url, read_page
from llmfleet.reconcile.machinery.secrets import BearerToken

SRC = Path(__file__).resolve().parents[2] / "operator" / "src" / "llmfleet"


@dataclass
class Server:
    """Answers every request with `status`, `body` and `headers` after `delay`; keeps
    (method, path, headers, body) of each."""

    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    got: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    port: int = 0


@pytest.fixture
def serve() -> Iterator[Callable[[], Server]]:
    started: list[ThreadingHTTPServer] = []

    def start() -> Server:
        server = Server()

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length) if length else b""
                server.got.append((self.command, self.path, dict(self.headers), sent))
                time.sleep(server.delay)
                try:
                    self.send_response(server.status)
                    for k, v in server.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(server.body)))
                    self.end_headers()
                    self.wfile.write(server.body)
                except (BrokenPipeError, ConnectionResetError):
                    # The caller gave up (an aborted call): expected. Uncaught, the server
                    # would print a traceback from this thread, and Python 3.11's traceback
                    # calls ast.parse, whose state is per interpreter: a test parsing in the
                    # main thread at that moment failed with "AST constructor recursion
                    # depth mismatch".
                    pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def log_message(self, format: str, *args: object) -> None:
                return

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Not daemon threads: server_close() joins every handler, so none outlives its test.
        httpd.daemon_threads = False
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        started.append(httpd)
        server.port = int(httpd.server_address[1])
        return server

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def proxy(serve: Callable[[], Server], monkeypatch: pytest.MonkeyPatch) -> Server:
    """A proxy every HTTP client that honours the environment would send its requests to."""
    server = serve()
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{server.port}")
    return server


def _scrape_engine(pod: Server, monkeypatch: pytest.MonkeyPatch) -> object:
    return kvcache.scrape("127.0.0.1", pod.port)


def _scrape_batch_runner(pod: Server, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(batchjob, "METRICS_PORT", pod.port)
    return batchjob.scrape("127.0.0.1")


def _list_adapters(pod: Server, monkeypatch: pytest.MonkeyPatch) -> object:
    pod.body = json.dumps({"data": [{"id": "sql", "parent": "base", "root": "/a"}]}).encode()
    return HttpEngineApi().adapters(Endpoint("127.0.0.1", pod.port, BearerToken("k")))


def _load_adapter(pod: Server, monkeypatch: pytest.MonkeyPatch) -> object:
    return HttpEngineApi().load(Endpoint("127.0.0.1", pod.port), "sql", "/a")


def _fetch_adapter(pod: Server, monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setattr(fetching, "FETCHER_PORT", pod.port)
    return fetching.HttpFetcherApi().fetch("127.0.0.1", BearerToken("t"), "s3://b/a", None)


CALLERS = [
    pytest.param(_scrape_engine, "/metrics", "{}", id="engine-kv-cache-scrape"),
    pytest.param(_scrape_batch_runner, "/metrics", "{}", id="batch-runner-scrape"),
    pytest.param(_list_adapters, "/v1/models", {"sql": "/a"}, id="engine-adapter-list"),
    pytest.param(_load_adapter, "/v1/load_lora_adapter", None, id="engine-adapter-load"),
    pytest.param(_fetch_adapter, "/v1/fetch", None, id="adapter-fetcher"),
]


@pytest.mark.parametrize(("caller", "path", "result"), CALLERS)
def test_every_pod_caller_goes_to_the_pod_directly_whatever_http_proxy_says(
    caller: Callable[[Server, pytest.MonkeyPatch], object],
    path: str,
    result: object,
    serve: Callable[[], Server],
    proxy: Server,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = serve()
    assert caller(pod, monkeypatch) == result
    assert [p for _, p, _, _ in pod.got] == [path]
    assert proxy.got == []


@pytest.mark.parametrize(("caller", "path", "result"), CALLERS)
def test_no_pod_caller_follows_a_redirect_away_from_the_pod(
    caller: Callable[[Server, pytest.MonkeyPatch], object],
    path: str,
    result: object,
    serve: Callable[[], Server],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod, elsewhere = serve(), serve()
    pod.status, pod.headers = (
        307,
        {"Location": f"http://127.0.0.1:{elsewhere.port}{path}"},
    )
    assert caller(pod, monkeypatch) != result
    assert len(pod.got) == 1
    assert elsewhere.got == []


@pytest.mark.parametrize(
    ("size", "cap", "read"),
    [
        pytest.param(100, 100, True, id="an-answer-at-the-cap-is-read"),
        pytest.param(101, 100, False, id="an-answer-past-the-cap-is-refused"),
    ],
)
def test_an_answer_larger_than_the_cap_is_refused(
    size: int, cap: int, read: bool, serve: Callable[[], Server]
) -> None:
    pod = serve()
    pod.body = b"x" * size
    url = f"http://127.0.0.1:{pod.port}/metrics"
    if read:
        assert call(url, None, 5, max_bytes=cap) == (200, "x" * size)
    else:
        with pytest.raises(PodCallError, match=f"more than {cap} bytes"):
            call(url, None, 5, max_bytes=cap)
    assert read_page("127.0.0.1", pod.port, "/metrics", 5, cap) == ("x" * size if read else None)


def test_an_engine_page_past_its_cap_is_not_read(
    serve: Callable[[], Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = serve()
    pod.body = b"x" * (podcall.MAX_ANSWER_BYTES + 1)
    assert kvcache.scrape("127.0.0.1", pod.port) is not None  # the engine's cap is larger
    monkeypatch.setattr(kvcache, "MAX_PAGE_BYTES", podcall.MAX_ANSWER_BYTES)
    assert kvcache.scrape("127.0.0.1", pod.port) is None


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://localhost:{port}/metrics", id="a-name"),
        pytest.param("https://127.0.0.1:{port}/metrics", id="not-http"),
        pytest.param("http://127.0.0.1/metrics", id="no-port"),
        pytest.param("http://user:pw@127.0.0.1:{port}/metrics", id="user-info"),
        pytest.param("127.0.0.1:{port}/metrics", id="no-scheme"),
    ],
)
def test_only_a_pod_ip_address_is_called(url: str, serve: Callable[[], Server]) -> None:
    pod = serve()
    with pytest.raises(PodCallError, match="not a pod's address"):
        call(url.format(port=pod.port), None, 5)
    assert pod.got == []


@pytest.mark.parametrize(
    ("ip", "url"),
    [
        pytest.param("127.17.0.3", "http://127.17.0.3:8000/metrics", id="ipv4"),
        pytest.param("fd00::a", "http://[fd00::a]:8000/metrics", id="ipv6-bracketed"),
        pytest.param("engine.example.com", None, id="a-name-is-never-dialled"),
        pytest.param("", None, id="no-ip"),
    ],
)
def test_pod_url_is_made_of_pod_ip_addresses_only(ip: str, url: str | None) -> None:
    assert pod_url(ip, 8000, "/metrics") == url


def test_a_pod_slower_than_the_timeout_is_an_error_naming_it(
    serve: Callable[[], Server],
) -> None:
    pod = serve()
    pod.delay = 1.0
    url = f"http://127.0.0.1:{pod.port}/metrics"
    started = time.monotonic()
    with pytest.raises(PodCallError, match=f"{url} did not answer"):
        call(url, None, 0.2)
    assert time.monotonic() - started < 0.9


def test_a_pod_that_is_not_listening_is_an_error_naming_it() -> None:
    with pytest.raises(PodCallError, match=r"http://127\.0\.0\.1:9/ did not answer"):
        call("http://127.0.0.1:9/", None, 2)


def test_a_body_is_posted_as_json_with_the_headers_given(
    serve: Callable[[], Server],
) -> None:
    pod = serve()
    pod.status, pod.body = 400, b"no such adapter"
    status, text = call(
        f"http://127.0.0.1:{pod.port}/v1/x?a=1",
        {"k": 1},
        5,
        {"Authorization": "Bearer t"},
    )
    assert (status, text) == (400, "no such adapter")
    method, path, headers, body = pod.got[0]
    assert (method, path, json.loads(body)) == ("POST", "/v1/x?a=1", {"k": 1})
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == "Bearer t"


def test_an_aborted_call_ends_at_once_and_a_later_one_is_not_sent(
    serve: Callable[[], Server],
) -> None:
    pod = serve()
    pod.delay = 1.5  # the pod would answer long after the abort
    url = f"http://127.0.0.1:{pod.port}/sleep"
    abort = podcall.Abort()
    errors: list[str] = []

    def sleep() -> None:
        try:
            call(url, {}, 30, abort=abort)
        except PodCallError as e:
            errors.append(str(e))

    caller = threading.Thread(target=sleep)
    caller.start()
    deadline = time.monotonic() + 5
    while not pod.got and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    abort.abort()
    caller.join(5)
    assert time.monotonic() - started < 0.5
    assert [e.startswith(f"{url} did not answer") for e in errors] == [True]
    with pytest.raises(PodCallError, match="not sent: the operator is stopping"):
        call(url, {}, 30, abort=abort)
    assert len(pod.got) == 1


# Modules that speak HTTP but not to pods, and why they differ from reconcile/machinery/podcall.py.
NOT_POD_CALLS = {
    "catalog/hub.py": "the Hub, by name, through the operator's proxy, following redirects",
    "fetcher/hub.py": "the Hub, from the adapter fetcher in the engine pod",
    "health.py": "kopf's liveness endpoint in this very process",
}


def _http_modules() -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[Any] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if {"urllib.request", "http.client", "requests", "urllib3"} & set(names):
                found.add(str(path.relative_to(SRC)))
    return found


def test_only_the_pod_client_and_the_hub_clients_speak_http() -> None:
    assert _http_modules() == {"reconcile/machinery/podcall.py", *NOT_POD_CALLS}
