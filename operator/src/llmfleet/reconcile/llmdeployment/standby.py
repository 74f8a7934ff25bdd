"""When to wake a standby engine and when to put one back to sleep (spec.autoscaling.standby;
docs/autoscaling.md, "Standby engines"). Pure: the loop that scrapes the queue and calls the
engines is standbyloop.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmfleet.models.standby import StandbyPlan

Action = Literal["wake", "sleep"]


@dataclass(frozen=True)
class StandbyState:
    asleep: int
    awake: int
    # Since when (monotonic seconds) the queue has stayed at or below sleepQueueDepth; None
    # while it is above.
    low_since: float | None = None


@dataclass(frozen=True)
class StandbyDecision:
    action: Action | None
    low_since: float | None


def decide(
    plan: StandbyPlan, state: StandbyState, waiting_per_pod: float | None, now: float
) -> StandbyDecision:
    """One step: wake one engine when the queue the HPA scales on passes its target, sleep one
    after the queue stayed low for the cooldown. An unknown queue (a failed scrape) changes
    nothing and restarts the cooldown, so no engine sleeps on a guess."""
    if waiting_per_pod is None:
        return StandbyDecision(None, None)
    if waiting_per_pod > plan.wake_queue_depth:
        return StandbyDecision("wake" if state.asleep else None, None)
    if waiting_per_pod > plan.sleep_queue_depth:
        return StandbyDecision(None, None)
    low_since = now if state.low_since is None else state.low_since
    if state.awake and now - low_since >= plan.cooldown_seconds:
        # The next engine waits a full cooldown of its own.
        return StandbyDecision("sleep", now)
    return StandbyDecision(None, low_since)
