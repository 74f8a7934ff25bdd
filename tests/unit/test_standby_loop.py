"""The standby engines' loop (reconcile/llmdeployment/standbyloop.py) against engines that answer as
vLLM does: which engine it calls, with what, and which readiness gate it turns, in what order. The
calls run in the background: a reconcile starts one and returns, the call's end enqueues the
LLMDeployment, and the next reconcile turns the gate."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest

from llmfleet.models.standby import StandbyPlan, StandbyStatus
from llmfleet.reconcile.llmdeployment.standbyloop import (
    StandbyReport,
    StandbyWatch,
    reconcile_standby,
)
from llmfleet.reconcile.machinery import podcall
from llmfleet.reconcile.machinery.backgroundcalls import BackgroundCalls
from llmfleet.reconcile.machinery.podcall import PodCallError
from llmfleet.reconcile.machinery.workqueue import Backoff
from llmfleet.render.standby import STANDBY_GATE

PLAN = StandbyPlan(
    replicas=2,
    gpus=2,
    host_memory_gib_per_replica=15.0,
    wake_queue_depth=4,
    sleep_queue_depth=1,
    cooldown_seconds=60,
)
TOKEN = "t0ken"


def pod(
    name: str,
    ip: str,
    *,
    standby: bool,
    gate: str | None = None,
    reason: str = "",
    ready: bool = True,
) -> Any:
    conditions = [{"type": "ContainersReady", "status": "True" if ready else "False"}]
    in_rotation = ready and (not standby or gate == "True")
    conditions.append({"type": "Ready", "status": "True" if in_rotation else "False"})
    if gate is not None:
        conditions.append({"type": STANDBY_GATE, "status": gate, "reason": reason})
    labels = {"llmfleet.dev/standby": "true"} if standby else {}
    return {
        "metadata": {"name": name, "uid": name, "labels": labels},
        "status": {"podIP": ip, "conditions": conditions},
    }


def page(waiting: float) -> str:
    return (
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
    )


class Engines:
    """Every call and gate change, in order; the queue each serving engine reports. While `held`
    is clear, a call waits in the engine (a sleep in progress)."""

    def __init__(self, queues: Mapping[str, float | None], answer: int | None = 200) -> None:
        self.queues = queues
        self.answer = answer  # None: the engine does not answer
        self.log: list[tuple[str, ...]] = []
        self.held = threading.Event()
        self.held.set()

    def scrape(self, ip: str, port: int) -> str | None:
        waiting = self.queues.get(ip)
        return None if waiting is None else page(waiting)

    def post(
        self, url: str, timeout: float, headers: Mapping[str, str], abort: podcall.Abort
    ) -> tuple[int, str]:
        self.log.append(("POST", url, headers.get("Authorization", "")))
        assert self.held.wait(10)
        if self.answer is None:
            raise PodCallError(f"{url} did not answer")
        return self.answer, "engine error" if self.answer != 200 else ""

    def gate(self, name: str, awake: bool, reason: str) -> None:
        self.log.append(("gate", name, str(awake), reason))


class Operator:
    """A StandbyWatch as a reconcile steps it, and what its calls' ends enqueued."""

    def __init__(self, engines: Engines, backoff: Backoff | None = None) -> None:
        self.engines = engines
        self.clock = [0.0]
        self.watch = StandbyWatch(8000, engines.scrape, engines.post, lambda: self.clock[0])
        if backoff is not None:
            self.watch.calls = BackgroundCalls(engines.post, backoff)
        self.enqueued: list[tuple[str, str, float]] = []
        self._heard = threading.Condition()
        self.watch.calls.notify_to(self._enqueue)

    def _enqueue(self, namespace: str, name: str, delay: float) -> None:
        with self._heard:
            self.enqueued.append((namespace, name, delay))
            self._heard.notify_all()

    def step(self, pods: list[Any], now: float | None = None) -> StandbyReport:
        if now is not None:
            self.clock[0] = now
        return self.watch.step("ns", "chat", PLAN, pods, token=TOKEN, set_gate=self.engines.gate)

    def wait_enqueued(self, count: int) -> None:
        with self._heard:
            assert self._heard.wait_for(lambda: len(self.enqueued) >= count, 5), self.enqueued


def step(engines: Engines, pods: list[Any]) -> StandbyReport:
    """A reconcile, and the reconcile its calls' ends enqueue: what the engines saw by then."""
    operator = Operator(engines)
    report = operator.step(pods)
    if report.calling:
        operator.wait_enqueued(len(report.calling))
        report = operator.step(pods)
    return report


SERVING = pod("chat-tp1-a", "10.0.0.1", standby=False)
BEARER = f"Bearer {TOKEN}"

# name -> (pods, queue of the serving engine, the calls and gates in order, asleep, awake)
CASES: dict[str, tuple[list[Any], float | None, list[tuple[str, ...]], int, int]] = {
    "a standby engine that just started is put to sleep, then gated out": (
        [SERVING, pod("chat-standby-a", "10.0.1.1", standby=True)],
        0.0,
        [
            ("POST", "http://10.0.1.1:8000/sleep?level=1", BEARER),
            ("gate", "chat-standby-a", "False", "Asleep"),
        ],
        1,
        0,
    ),
    "a queue above the target wakes one, then gates it in": (
        [
            SERVING,
            pod("chat-standby-a", "10.0.1.1", standby=True, gate="False"),
            pod("chat-standby-b", "10.0.1.2", standby=True, gate="False"),
        ],
        4.5,
        [
            ("POST", "http://10.0.1.1:8000/wake_up", BEARER),
            ("gate", "chat-standby-a", "True", "Woken"),
        ],
        1,
        1,
    ),
    "a queue at the target wakes none": (
        [SERVING, pod("chat-standby-a", "10.0.1.1", standby=True, gate="False")],
        4.0,
        [],
        1,
        0,
    ),
    "an unread queue changes nothing": (
        [SERVING, pod("chat-standby-a", "10.0.1.1", standby=True, gate="False")],
        None,
        [],
        1,
        0,
    ),
    "a standby engine whose vLLM is not up yet is left alone": (
        [SERVING, pod("chat-standby-a", "10.0.1.1", standby=True, ready=False)],
        9.0,
        [],
        0,
        0,
    ),
    "an engine whose sleep failed after its gate went False is put to sleep again": (
        [
            SERVING,
            pod(
                "chat-standby-a",
                "10.0.1.1",
                standby=True,
                gate="False",
                reason="FallingAsleep",
            ),
        ],
        0.0,
        [
            ("POST", "http://10.0.1.1:8000/sleep?level=1&mode=wait", BEARER),
            ("gate", "chat-standby-a", "False", "Asleep"),
        ],
        1,
        0,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_loop_calls_the_engines_and_turns_their_gates(case: str) -> None:
    pods, queue, calls, asleep, awake = CASES[case]
    engines = Engines({"10.0.0.1": queue})
    report = step(engines, pods)
    assert engines.log == calls
    assert (report.asleep, report.awake) == (asleep, awake)


def test_after_the_cooldown_one_engine_leaves_rotation_before_it_sleeps() -> None:
    awake = pod("chat-standby-a", "10.0.1.1", standby=True, gate="True")
    engines = Engines({"10.0.0.1": 0.0, "10.0.1.1": 0.0})
    operator = Operator(engines)
    for now in (0.0, 30.0, 59.0):
        operator.step([SERVING, awake], now)
    assert engines.log == []
    operator.step([SERVING, awake], 60.0)
    operator.wait_enqueued(1)
    report = operator.step([SERVING, awake], 61.0)
    assert engines.log == [
        ("gate", "chat-standby-a", "False", "FallingAsleep"),
        ("POST", "http://10.0.1.1:8000/sleep?level=1&mode=wait", BEARER),
        ("gate", "chat-standby-a", "False", "Asleep"),
    ]
    assert (report.slept, report.asleep, report.awake) == (("chat-standby-a",), 1, 0)


def test_the_queue_is_averaged_over_every_engine_in_rotation() -> None:
    awake = pod("chat-standby-a", "10.0.1.1", standby=True, gate="True")
    asleep = pod("chat-standby-b", "10.0.1.2", standby=True, gate="False")
    # 9 waiting on one engine and 0 on the woken one: 4.5 per engine, above the target of 4.
    engines = Engines({"10.0.0.1": 9.0, "10.0.1.1": 0.0})
    report = step(engines, [SERVING, awake, asleep])
    assert report.woken == ("chat-standby-b",)


NEW = pod("chat-standby-a", "10.0.1.1", standby=True)
ASLEEP = pod("chat-standby-a", "10.0.1.1", standby=True, gate="False", reason="Asleep")
AWAKE = pod("chat-standby-a", "10.0.1.1", standby=True, gate="True", reason="Woken")
# name -> (the standby engine, queue of the serving engine, the times of the steps until the call
# is sent, the call, the gate its end turns)
IN_FLIGHT: dict[str, tuple[Any, float, tuple[float, ...], str, tuple[str, ...]]] = {
    "the sleep after its start": (
        NEW,
        0.0,
        (0.0,),
        "/sleep?level=1",
        ("gate", "chat-standby-a", "False", "Asleep"),
    ),
    "a wake on a surge": (
        ASLEEP,
        9.0,
        (0.0,),
        "/wake_up",
        ("gate", "chat-standby-a", "True", "Woken"),
    ),
    "the sleep after the cooldown": (
        AWAKE,
        0.0,
        (0.0, 60.0),
        "/sleep?level=1&mode=wait",
        ("gate", "chat-standby-a", "False", "Asleep"),
    ),
}


@pytest.mark.parametrize("case", IN_FLIGHT)
def test_a_reconcile_returns_while_its_call_is_in_flight_and_the_next_sends_no_second(
    case: str,
) -> None:
    standby, queue, times, path, turned = IN_FLIGHT[case]
    engines = Engines({"10.0.0.1": queue, "10.0.1.1": 0.0})
    engines.held.clear()  # the engine takes its time
    operator = Operator(engines)
    for now in times:
        report = operator.step([SERVING, standby], now)
    assert report.calling == ("chat-standby-a",)
    again = operator.step([SERVING, standby], times[-1] + 1)
    assert again.calling == ("chat-standby-a",)
    posts = [e for e in engines.log if e[0] == "POST"]
    assert posts == [("POST", f"http://10.0.1.1:8000{path}", BEARER)]
    assert turned not in engines.log
    assert operator.enqueued == []
    engines.held.set()
    operator.wait_enqueued(1)
    assert operator.enqueued == [("ns", "chat", 0.0)]
    ended = operator.step([SERVING, standby], times[-1] + 2)
    assert (ended.calling, engines.log[-1]) == ((), turned)
    assert [e for e in engines.log if e[0] == "POST"] == posts


FIRST_RETRY = 0.2  # the backoff's first delay in these tests (1 s in the operator)


@pytest.mark.parametrize(
    ("answer", "why"),
    [(401, "answered 401"), (None, "did not answer")],
    ids=["refused-by-the-fence", "no-answer"],
)
@pytest.mark.parametrize("case", IN_FLIGHT)
def test_a_failed_call_is_reported_and_sent_again_after_the_backoff(
    case: str, answer: int | None, why: str
) -> None:
    standby, queue, times, _, turned = IN_FLIGHT[case]
    engines = Engines({"10.0.0.1": queue, "10.0.1.1": 0.0}, answer=answer)
    operator = Operator(engines, Backoff(first=FIRST_RETRY, cap=FIRST_RETRY))
    for now in times:
        operator.step([SERVING, standby], now)
    operator.wait_enqueued(1)
    ((namespace, name, delay),) = operator.enqueued
    assert (namespace, name) == ("ns", "chat")
    assert FIRST_RETRY / 2 <= delay <= FIRST_RETRY
    sent = time.monotonic()
    report = operator.step([SERVING, standby], times[-1] + 1)
    assert why in (report.failed or {})["chat-standby-a"]
    assert turned not in engines.log
    posts = [e for e in engines.log if e[0] == "POST"]
    assert len(posts) == 1
    # Within the backoff: not sent again, however often the LLMDeployment is reconciled.
    if time.monotonic() - sent < delay:
        operator.step([SERVING, standby], times[-1] + 1)
        assert len([e for e in engines.log if e[0] == "POST"]) == 1
    time.sleep(delay)
    # The engine behind its gate False owes its sleep; the others are asked as before.
    gated = [e for e in engines.log if e[0] == "gate"]
    view = (
        pod(
            "chat-standby-a",
            "10.0.1.1",
            standby=True,
            gate=gated[-1][2],
            reason=gated[-1][3],
        )
        if gated
        else standby
    )
    engines.answer = 200
    operator.step([SERVING, view], times[-1] + 2)
    operator.wait_enqueued(2)
    assert [e for e in engines.log if e[0] == "POST"] == posts * 2
    operator.step([SERVING, view], times[-1] + 3)
    assert engines.log[-1] == turned


def test_stopping_aborts_a_call_in_flight_and_sends_no_more() -> None:
    """A real call to a pod that takes its request and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as never_answers:
        port = never_answers.getsockname()[1]
        log: list[tuple[str, ...]] = []
        watch = StandbyWatch(port, lambda ip, port: page(0.0))
        enqueued: list[tuple[str, str, float]] = []
        watch.calls.notify_to(lambda *key: enqueued.append(key))
        new = pod("chat-standby-a", "127.0.0.1", standby=True)

        def step() -> StandbyReport:
            return watch.step(
                "ns",
                "chat",
                PLAN,
                [new],
                token=TOKEN,
                set_gate=lambda *g: log.append(g),
            )

        assert step().calling == ("chat-standby-a",)
        connection, _ = never_answers.accept()  # the request is on its way
        with connection:
            started = time.monotonic()
            watch.calls.stop()
            assert watch.calls.join(5)
            assert time.monotonic() - started < 1
            assert (step().calling, len(watch.calls), enqueued, log) == ((), 0, [], [])
            never_answers.settimeout(0.2)
            with pytest.raises(TimeoutError):
                never_answers.accept()  # no second call


class Tokens:
    def token(self, namespace: str, name: str, purpose: str) -> Any:
        return SimpleNamespace(value=TOKEN)


class Core:
    def __init__(self) -> None:
        self.patched: list[tuple[str, Any]] = []

    def patch_namespaced_pod_status(self, pod: str, namespace: str, body: Any) -> None:
        self.patched.append((pod, body["status"]["conditions"][0]["reason"]))


def test_a_failed_call_is_a_warning_event_on_the_llmdeployment() -> None:
    engines = Engines({"10.0.0.1": 0.0}, answer=503)
    operator = Operator(engines)
    core, events = Core(), []
    body = {"metadata": {"namespace": "ns", "name": "chat"}}

    def reconcile() -> Any:
        return reconcile_standby(
            operator.watch,
            cast("Any", core),
            lambda _, kind, reason, message: events.append((kind, reason, message)),
            body,
            PLAN,
            pods=[SERVING, NEW],
            tokens=cast("Any", Tokens()),
        )

    assert reconcile() == StandbyStatus(asleep=0, awake=0)
    operator.wait_enqueued(1)
    assert reconcile() == StandbyStatus(asleep=0, awake=0)
    ((kind, reason, message),) = events
    assert (kind, reason, core.patched) == ("Warning", "StandbyCallFailed", [])
    assert message.startswith("standby engine pod chat-standby-a: POST /sleep?level=1 answered 503")
