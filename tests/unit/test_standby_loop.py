"""The standby engines' loop (reconcile/llmdeployment/standbyloop.py) against engines that answer as
vLLM does: which engine it calls, with what, and which readiness gate it turns, in what order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from llmfleet.models.standby import StandbyPlan
from llmfleet.reconcile.llmdeployment.standbyloop import StandbyReport, StandbyWatch
from llmfleet.reconcile.machinery.podcall import PodCallError
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


def pod(name: str, ip: str, *, standby: bool, gate: str | None = None, ready: bool = True) -> Any:
    conditions = [{"type": "ContainersReady", "status": "True" if ready else "False"}]
    in_rotation = ready and (not standby or gate == "True")
    conditions.append({"type": "Ready", "status": "True" if in_rotation else "False"})
    if gate is not None:
        conditions.append({"type": STANDBY_GATE, "status": gate})
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
    """Every call and gate change, in order; the queue each serving engine reports."""

    def __init__(self, queues: Mapping[str, float | None], answer: int | None = 200) -> None:
        self.queues = queues
        self.answer = answer  # None: the engine does not answer
        self.log: list[tuple[str, ...]] = []

    def scrape(self, ip: str, port: int) -> str | None:
        waiting = self.queues.get(ip)
        return None if waiting is None else page(waiting)

    def post(self, url: str, timeout: float, headers: Mapping[str, str]) -> tuple[int, str]:
        self.log.append(("POST", url, headers.get("Authorization", "")))
        if self.answer is None:
            raise PodCallError(f"{url} did not answer")
        return self.answer, ""

    def gate(self, name: str, awake: bool, reason: str) -> None:
        self.log.append(("gate", name, str(awake), reason))


def step(
    engines: Engines, pods: list[Any], now: float = 0.0, watch: StandbyWatch | None = None
) -> StandbyReport:
    clock = [now]
    watch = watch or StandbyWatch(8000, engines.scrape, engines.post, lambda: clock[0])
    return watch.step("ns", "chat", PLAN, pods, token=TOKEN, set_gate=engines.gate)


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
    clock = [0.0]
    watch = StandbyWatch(8000, engines.scrape, engines.post, lambda: clock[0])
    for now in (0.0, 30.0, 59.0):
        clock[0] = now
        watch.step("ns", "chat", PLAN, [SERVING, awake], token=TOKEN, set_gate=engines.gate)
    assert engines.log == []
    clock[0] = 60.0
    report = watch.step("ns", "chat", PLAN, [SERVING, awake], token=TOKEN, set_gate=engines.gate)
    assert engines.log == [
        ("gate", "chat-standby-a", "False", "Asleep"),
        ("POST", "http://10.0.1.1:8000/sleep?level=1&mode=wait", BEARER),
    ]
    assert (report.slept, report.asleep, report.awake) == (("chat-standby-a",), 1, 0)


def test_the_queue_is_averaged_over_every_engine_in_rotation() -> None:
    awake = pod("chat-standby-a", "10.0.1.1", standby=True, gate="True")
    asleep = pod("chat-standby-b", "10.0.1.2", standby=True, gate="False")
    # 9 waiting on one engine and 0 on the woken one: 4.5 per engine, above the target of 4.
    engines = Engines({"10.0.0.1": 9.0, "10.0.1.1": 0.0})
    report = step(engines, [SERVING, awake, asleep])
    assert report.woken == ("chat-standby-b",)


@pytest.mark.parametrize(
    ("answer", "why"),
    [(401, "answered 401"), (None, "did not answer")],
    ids=["refused-by-the-fence", "no-answer"],
)
def test_an_engine_that_does_not_wake_stays_out_of_rotation(answer: int | None, why: str) -> None:
    engines = Engines({"10.0.0.1": 9.0}, answer=answer)
    report = step(engines, [SERVING, pod("chat-standby-a", "10.0.1.1", standby=True, gate="False")])
    assert [e for e in engines.log if e[0] == "gate"] == []
    assert (report.woken, report.asleep, report.awake) == ((), 1, 0)
    assert why in (report.failed or {})["chat-standby-a"]
