"""A stopping leader ends every writer before it may hand the Lease over: its loops are joined, a
reconcile that outlives the drain (an adapter fetch) can write nothing more, a standby engine's
sleep in flight beside them is aborted, and the writes already sent have ended, all within the
drain plus one call timeout."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
from kubernetes import client as k8s

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.reconcile import manager as manager_module
from llmfleet.reconcile.llmdeployment.stallwatch import StallWatch
from llmfleet.reconcile.llmdeployment.standbyloop import StandbyWatch
from llmfleet.reconcile.machinery.backgroundcalls import Request
from llmfleet.reconcile.machinery.resync import Resyncer
from llmfleet.reconcile.machinery.workqueue import Backoff
from llmfleet.reconcile.machinery.writegate import GatedApiClient, NotLeadingError, WriteGate
from llmfleet.reconcile.manager import Manager
from llmfleet.render.names import DEPLOYMENT_LABEL
from llmfleet.settings import OperatorSettings

CALL_TIMEOUT = 0.3
DRAIN = 0.3


class Journal:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)


class SlowRest:
    """The HTTP layer: each write takes `seconds`, then is journalled as stored."""

    def __init__(self, journal: Journal, seconds: float) -> None:
        self.journal, self.seconds = journal, seconds

    def __getattr__(self, method: str) -> Any:
        def send(url: str, **_: Any) -> str:
            time.sleep(self.seconds)
            self.journal(f"stored {url}")
            return "stored"

        return send


class View:
    def __init__(self, api: Any, on_change: Any, namespaces: Any) -> None:
        pass

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def dead(self) -> list[str]:
        return []


class Deployments:
    """A reconcile of `ns/fetching` waits on an adapter fetch far longer than the drain, then
    writes its status; `ns/writing` writes at once."""

    def __init__(self, api: GatedApiClient, journal: Journal, fetch_done: threading.Event) -> None:
        self.api, self.journal, self.fetch_done = api, journal, fetch_done
        self.stalls = StallWatch(8000)  # no LLMDeployment watched: the stall poll queues none
        self.standby = StandbyWatch(8000)  # nor the standby poll

    backoff = Backoff()

    def work(self, namespace: str, name: str) -> None:
        if name == "fetching":
            self.fetch_done.wait(10)
        try:
            self.api.request("PATCH", f"/{namespace}/{name}/status", body={})
        except NotLeadingError:
            self.journal(f"refused {namespace}/{name}")

    def names(self, namespaces: Any) -> list[tuple[str, str]]:
        return []


class Batch:
    def __init__(self) -> None:
        self._poller = Resyncer("batch-poll", list, lambda ns, n: None, 0.05)

    def start_polling(self, enqueue: Any) -> None:
        self._poller.start()

    def stop_polling(self, timeout: float = 0.0) -> bool:
        self._poller.stop()
        return self._poller.join(timeout)

    def polling(self) -> bool:
        return self._poller.alive()

    backoff = Backoff()

    def work(self, namespace: str, name: str) -> None: ...


def writing_manager(
    monkeypatch: pytest.MonkeyPatch, journal: Journal, fetch_done: threading.Event
) -> Manager:
    conf = k8s.Configuration()
    conf.host = "http://127.0.0.1:9"
    api = GatedApiClient(conf, WriteGate(time.monotonic() + 60, call_timeout=CALL_TIMEOUT))
    api.rest_client = SlowRest(journal, seconds=0.2)
    monkeypatch.setattr(manager_module.ChildView, "of_children", View)
    monkeypatch.setattr(manager_module, "ModelConfigs", lambda *a: None)
    monkeypatch.setattr(
        manager_module,
        "Controller",
        lambda *a, **k: Deployments(api, journal, fetch_done),
    )
    monkeypatch.setattr(manager_module, "BatchJobController", lambda *a, **k: Batch())
    running = Manager(api, OperatorSettings(resync_seconds=0.05), DEFAULT_GPU_PROFILES, None)
    running.start_writing()
    return running


def test_stop_ends_every_writer_before_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal, fetch_done = Journal(), threading.Event()
    running = writing_manager(monkeypatch, journal, fetch_done)
    loop = running.loops[DEPLOYMENT_LABEL]
    loop.enqueue("ns", "fetching")
    loop.enqueue("ns", "writing")
    while running.gate.in_flight == 0:  # the status write of ns/writing is on the wire
        time.sleep(0.01)
    started = time.monotonic()
    running.stop(timeout=DRAIN)
    took = time.monotonic() - started
    journal("stopped: the Lease may be released")
    fetch_done.set()  # the adapter fetch ends only now, long after the drain
    deadline = time.monotonic() + 5
    while "refused ns/fetching" not in journal.lines and time.monotonic() < deadline:
        time.sleep(0.01)
    assert journal.lines == [
        "stored /ns/writing/status",
        "stopped: the Lease may be released",
        "refused ns/fetching",
    ]
    assert took < DRAIN + CALL_TIMEOUT + 0.5
    assert not running._resync.alive()
    assert not running._stall_poll.alive()
    assert not running.batch.polling()
    assert running.gate.in_flight == 0


def test_stop_returns_at_once_when_nothing_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal, fetch_done = Journal(), threading.Event()
    running = writing_manager(monkeypatch, journal, fetch_done)
    started = time.monotonic()
    running.stop(timeout=5)
    assert time.monotonic() - started < 1
    assert not running.gate.is_open()


def test_stop_aborts_a_standby_engines_sleep_in_flight_before_it_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    journal, fetch_done = Journal(), threading.Event()
    running = writing_manager(monkeypatch, journal, fetch_done)
    calls = running.deployments.standby.calls
    with socket.create_server(("127.0.0.1", 0)) as never_answers:
        url = f"http://127.0.0.1:{never_answers.getsockname()[1]}/sleep?level=1"
        # A 72B fp8 takes a minute to fall asleep: far longer than the drain.
        assert calls.start(("ns", "chat"), Request("chat-standby-a", url, "/sleep", 120.0, {}))
        connection, _ = never_answers.accept()
        with connection:
            started = time.monotonic()
            running.stop(timeout=DRAIN)
            assert time.monotonic() - started < DRAIN + CALL_TIMEOUT + 0.5
            assert len(calls) == 0
            assert not calls.start(("ns", "chat"), Request("chat-standby-b", url, "/sleep", 1, {}))
