"""When the operator wakes a standby engine and when it puts one back to sleep."""

from __future__ import annotations

import pytest

from llmfleet.models.standby import StandbyPlan
from llmfleet.reconcile.llmdeployment.standby import StandbyDecision, StandbyState, decide

PLAN = StandbyPlan(
    replicas=2,
    gpus=2,
    host_memory_gib_per_replica=15.0,
    wake_queue_depth=4,
    sleep_queue_depth=1,
    cooldown_seconds=120,
)
NOW = 1_000.0

# (waiting per pod, asleep, awake, low since) -> (action, low since)
CASES: dict[str, tuple[float | None, int, int, float | None, StandbyDecision]] = {
    "a surge above the target wakes one": (4.5, 2, 0, None, StandbyDecision("wake", None)),
    "a surge wakes one more while others are awake": (
        9.0,
        1,
        1,
        None,
        StandbyDecision("wake", None),
    ),
    "at the target nothing wakes": (4.0, 2, 0, None, StandbyDecision(None, None)),
    "a surge with every standby awake wakes none": (9.0, 0, 2, None, StandbyDecision(None, None)),
    "between the thresholds nothing changes": (2.0, 1, 1, 900.0, StandbyDecision(None, None)),
    "a low queue starts the cooldown": (1.0, 1, 1, None, StandbyDecision(None, NOW)),
    "within the cooldown it stays awake": (0.0, 1, 1, NOW - 119, StandbyDecision(None, NOW - 119)),
    "after the cooldown one sleeps": (0.0, 1, 1, NOW - 120, StandbyDecision("sleep", NOW)),
    "a low queue with none awake sleeps none": (
        0.0,
        2,
        0,
        NOW - 500,
        StandbyDecision(None, NOW - 500),
    ),
    "an unknown queue changes nothing": (None, 1, 1, NOW - 500, StandbyDecision(None, None)),
}


@pytest.mark.parametrize("case", CASES)
def test_standby_engines_wake_on_a_surge_and_sleep_after_a_quiet_cooldown(case: str) -> None:
    waiting, asleep, awake, low_since, expected = CASES[case]
    state = StandbyState(asleep=asleep, awake=awake, low_since=low_since)
    assert decide(PLAN, state, waiting, NOW) == expected


def test_a_surge_that_ends_puts_the_woken_engine_back_to_sleep_once() -> None:
    state = StandbyState(asleep=1, awake=0)
    actions = []
    surge = [6.0, 6.0, 3.0]  # above the target, then between the thresholds
    for second, waiting in enumerate(surge + [0.0] * 200):
        decision = decide(PLAN, state, waiting, float(second))
        actions.append(decision.action)
        woke, slept = decision.action == "wake", decision.action == "sleep"
        state = StandbyState(
            asleep=state.asleep - woke + slept,
            awake=state.awake + woke - slept,
            low_since=decision.low_since,
        )
    quiet_from = len(surge)
    assert [(s, a) for s, a in enumerate(actions) if a] == [
        (0, "wake"),
        (quiet_from + PLAN.cooldown_seconds, "sleep"),
    ]
