"""The operator's /healthz (its liveness and readiness probes): 200 while every check passes,
500 naming what failed otherwise, so a kubelet restarts a replica whose loops died and an
operator reading the probe's output sees why."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from llmfleet.health import KOPF_START_GRACE, Check, HealthServer, kopf_check


@pytest.fixture
def serve() -> Iterator[list[HealthServer]]:
    servers: list[HealthServer] = []
    yield servers
    for s in servers:
        s.stop()


def get(server: HealthServer, path: str = "/healthz") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def started(serve: list[HealthServer], checks: list[Check]) -> HealthServer:
    server = HealthServer("http://127.0.0.1:0/healthz", checks)
    server.start()
    serve.append(server)
    return server


CASES = {
    "all-pass": ([(True, "standing by")], 200, ["ok: standing by"]),
    "a-loop-ended": (
        [(True, "leading"), (False, "ended: resync")],
        500,
        ["ok: leading", "FAIL: ended: resync"],
    ),
}


@pytest.mark.parametrize(("results", "code", "lines"), CASES.values(), ids=CASES.keys())
def test_the_probe_fails_naming_the_check_that_failed(
    serve: list[HealthServer], results: list[tuple[bool, str]], code: int, lines: list[str]
) -> None:
    server = started(serve, [lambda r=r: r for r in results])  # type: ignore[misc]
    got, text = get(server)
    assert got == code
    assert text.splitlines() == lines


def test_a_check_that_raises_fails_the_probe_instead_of_the_server(
    serve: list[HealthServer],
) -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    server = started(serve, [broken])
    assert get(server) == (500, "FAIL: check failed: boom\n")
    assert get(server, "/other")[0] == 404


def test_kopf_that_never_answers_fails_only_after_its_start_grace() -> None:
    dead = "http://127.0.0.1:9/healthz"  # discard port: nothing listens
    assert kopf_check(dead, lambda: None)() == (True, "kopf not started")
    assert kopf_check(dead, time.monotonic)() == (True, "kopf starting")
    passed, why = kopf_check(dead, lambda: time.monotonic() - KOPF_START_GRACE - 1)()
    assert not passed
    assert why.startswith("kopf does not answer")
