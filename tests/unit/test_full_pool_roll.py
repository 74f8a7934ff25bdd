"""A healthy fleet's rollout on a full GPU pool: with 2 or more serving pods it replaces them one
at a time in place and never stops serving; with one it waits for a GPU, saying so; the choice
holds from the first replacement to the last; and neither way reads Degraded while the old pods
serve, whereas a pod the fleet itself is short of still does."""

from __future__ import annotations

from typing import Any

import pytest
from rolloutpods import FLEET, NEW, OLD, OWNER, deployment, pod, spec

from llmfleet.models.status import LLMDeploymentStatus, status_json
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.full_pool_roll import FullPoolRoll, full_pool_roll
from llmfleet.reconcile.llmdeployment.status import (
    Observed,
    newly_announced,
    ready_status,
)
from llmfleet.reconcile.machinery.pod_blockers import blockers
from llmfleet.render import render_fleet
from llmfleet.render.rollout_strategy import ONE_AT_A_TIME_ANNOTATION

PAIR = plan(spec(2))
MARK = {ONE_AT_A_TIME_ANNOTATION: "true"}


def engine(replicas: int, *, marked: bool = False) -> dict[str, Any]:
    """The live engine Deployment, as the last reconcile rendered it."""
    return deployment(replicas, replicas, 0, MARK if marked else None)


def serving(name: str, template: str = OLD) -> dict[str, Any]:
    return pod(name, template, ready=True)


def waits(name: str = "n1") -> dict[str, Any]:
    """A pod of the new template the scheduler left Pending: no node has a free GPU."""
    return pod(name, NEW, gpu_short=True)


@pytest.mark.parametrize(
    ("pods", "replicas", "marked", "one_at_a_time", "waiting"),
    [
        pytest.param(
            [serving("o1"), serving("o2"), waits()],
            2,
            False,
            True,
            ("n1",),
            id="two-serving-pods-roll-one-at-a-time",
        ),
        pytest.param(
            [serving("o1"), waits()],
            1,
            False,
            False,
            ("n1",),
            id="the-only-serving-pod-is-kept-and-the-rollout-waits",
        ),
        pytest.param(
            [serving("o1"), pod("o2"), waits()],
            2,
            False,
            False,
            ("n1",),
            id="an-earlier-pod-still-starting-so-one-serves-the-rollout-waits",
        ),
        pytest.param(
            [serving("o1"), serving("o2"), pod("o3", gpu_short=True), waits()],
            3,
            False,
            False,
            ("n1",),
            id="an-earlier-pod-short-of-gpus-itself-the-rollout-waits",
        ),
        pytest.param(
            [serving("o1", NEW), serving("o2", NEW), waits()],
            3,
            False,
            False,
            (),
            id="a-scale-up-short-of-gpus-is-no-rollout",
        ),
        pytest.param(
            [serving("o1"), serving("o2")],
            2,
            False,
            False,
            (),
            id="no-pod-waits-for-gpus-the-fleet-surges",
        ),
        pytest.param(
            [serving("o1"), pod("o2", restarts=3, waiting="CrashLoopBackOff"), waits()],
            2,
            False,
            False,
            ("n1",),
            id="an-earlier-pod-that-serves-nothing-is-replaced-first-instead",
        ),
        pytest.param(
            [serving("o1"), serving("o2"), waits()],
            0,
            False,
            False,
            ("n1",),
            id="no-engine-deployment-yet",
        ),
        pytest.param(
            [serving("o1"), pod("o2", deleting=True), waits()],
            2,
            True,
            True,
            ("n1",),
            id="marked-the-first-replacement-frees-its-gpu",
        ),
        pytest.param(
            [serving("o1"), pod("n1", NEW)],
            2,
            True,
            True,
            (),
            id="marked-between-two-replacements-no-pod-waits-the-roll-goes-on",
        ),
        pytest.param(
            [serving("o1"), pod("n1", NEW)],
            2,
            False,
            False,
            (),
            id="unmarked-the-same-pods-surge-as-before",
        ),
        pytest.param(
            [pod("o1", deleting=True), serving("n1", NEW), waits("n2")],
            2,
            True,
            True,
            ("n2",),
            id="marked-the-last-earlier-pod-going",
        ),
        pytest.param(
            [serving("n1", NEW), waits("n2")],
            2,
            True,
            True,
            ("n2",),
            id="marked-the-last-new-pod-not-yet-placed-on-the-freed-gpu",
        ),
        pytest.param(
            [serving("n1", NEW), serving("n2", NEW)],
            2,
            True,
            False,
            (),
            id="marked-every-pod-new-and-placed-the-roll-is-over",
        ),
        pytest.param(
            [serving("o1"), pod("n1", NEW)],
            1,
            True,
            False,
            (),
            id="marked-but-scaled-to-one-replica-no-more-in-place",
        ),
    ],
)
def test_a_healthy_fleet_rolls_one_at_a_time_only_when_one_pod_down_leaves_others_serving(
    pods: list[dict[str, Any]],
    replicas: int,
    marked: bool,
    one_at_a_time: bool,
    waiting: tuple[str, ...],
) -> None:
    live = engine(replicas, marked=marked) if replicas else None
    roll = full_pool_roll(pods, PAIR, live)
    assert (roll.one_at_a_time, roll.waiting) == (one_at_a_time, waiting)
    # A pure reading: the order the pods are listed in changes nothing.
    assert full_pool_roll(list(reversed(pods)), PAIR, live) == roll


def test_a_roll_of_two_keeps_its_way_from_first_replacement_to_last() -> None:
    """The pods the Deployment controller goes through under maxSurge 0 / maxUnavailable 1,
    each read with the mark the previous reconcile rendered: the strategy never flips back to
    surging mid-roll, and is back to surging once the last new pod is placed."""
    steps = [
        [serving("o1"), serving("o2"), waits("n1")],
        [serving("o1"), pod("o2", deleting=True), waits("n1")],
        [serving("o1"), pod("n1", NEW)],
        [serving("o1"), serving("n1", NEW)],
        [pod("o1", deleting=True), serving("n1", NEW), waits("n2")],
        [serving("n1", NEW), waits("n2")],
    ]
    marked = False
    ways = []
    for pods in steps:
        marked = full_pool_roll(pods, PAIR, engine(2, marked=marked)).one_at_a_time
        ways.append(marked)
    assert ways == [True] * len(steps)
    # The last new pod placed: what is left is its start, which no replacement holds up.
    done = [serving("n1", NEW), pod("n2", NEW)]
    assert not full_pool_roll(done, PAIR, engine(2, marked=True)).one_at_a_time


def rolling_update(roll: FullPoolRoll) -> tuple[dict[str, Any], dict[str, str]]:
    objects = render_fleet(
        OWNER,
        spec(2),
        PAIR,
        FLEET,
        replace_first=len(roll.replace_first),
        one_at_a_time=roll.one_at_a_time,
    ).objects()
    (found,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-tp1"
    ]
    return found["spec"]["strategy"]["rollingUpdate"], found["metadata"].get("annotations") or {}


@pytest.mark.parametrize(
    ("roll", "surge", "unavailable", "marked"),
    [
        pytest.param(FullPoolRoll(), 1, 0, False, id="no-wait-surges"),
        pytest.param(FullPoolRoll(waiting=("n1",)), 1, 0, False, id="a-wait-keeps-surging"),
        pytest.param(
            FullPoolRoll(one_at_a_time=True),
            0,
            1,
            True,
            id="one-at-a-time-as-the-pdb-allows",
        ),
        pytest.param(
            FullPoolRoll(replace_first=("a", "b")),
            0,
            2,
            False,
            id="pods-that-serve-nothing-go-first",
        ),
    ],
)
def test_the_engine_deployment_renders_the_way_of_the_roll(
    roll: FullPoolRoll, surge: int, unavailable: int, marked: bool
) -> None:
    rolling, annotations = rolling_update(roll)
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (surge, unavailable)
    assert (ONE_AT_A_TIME_ANNOTATION in annotations) == marked


def test_the_pdb_lets_go_as_many_pods_as_the_roll_takes_down() -> None:
    objects = render_fleet(OWNER, spec(2), PAIR, FLEET, one_at_a_time=True).objects()
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    rolling, _ = rolling_update(FullPoolRoll(one_at_a_time=True))
    assert pdb["spec"]["maxUnavailable"] == rolling["maxUnavailable"]


def conditions(
    pods: list[dict[str, Any]], roll: FullPoolRoll, *, ready: int, replicas: int
) -> dict[str, tuple[str, str, str]]:
    named = [
        {
            **p,
            "metadata": {
                **p["metadata"],
                "namespace": "team-a",
                "uid": p["metadata"]["name"],
            },
        }
        for p in pods
    ]
    observed = Observed(
        engine=deployment(ready, replicas, 0),
        old_engines=(),
        hpa=None,
        pods=tuple(named),
        blockers=tuple(blockers(named, ())),
        roll=roll,
    )
    fleet_plan = plan(spec(replicas))
    new = ready_status(
        old=LLMDeploymentStatus(),
        generation=2,
        plan=fleet_plan,
        observed=observed,
        endpoint="e",
    )
    return {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in status_json(new)["conditions"]
    }


@pytest.mark.parametrize(
    ("pods", "roll", "ready", "replicas", "progressing", "degraded"),
    [
        pytest.param(
            [serving("o1"), serving("o2"), waits()],
            FullPoolRoll(one_at_a_time=True, waiting=("n1",)),
            2,
            2,
            "RollingOneAtATime",
            "False",
            id="rolling-one-at-a-time-is-no-fault",
        ),
        pytest.param(
            [serving("o1"), pod("o2", deleting=True), waits()],
            FullPoolRoll(one_at_a_time=True, waiting=("n1",)),
            1,
            2,
            "RollingOneAtATime",
            "False",
            id="the-one-pod-down-the-budget-allows-is-no-fault",
        ),
        pytest.param(
            [pod("o1", deleting=True), waits()],
            FullPoolRoll(one_at_a_time=True, waiting=("n1",)),
            0,
            2,
            "RollingOneAtATime",
            "True",
            id="more-down-than-the-budget-allows-is-a-fault",
        ),
        pytest.param(
            [serving("o1"), waits()],
            FullPoolRoll(waiting=("n1",)),
            1,
            1,
            "WaitingForGPUsToRoll",
            "False",
            id="the-single-pod-serves-while-the-rollout-waits",
        ),
        pytest.param(
            [serving("o1"), pod("o2", gpu_short=True), waits()],
            FullPoolRoll(waiting=("n1",)),
            1,
            2,
            "WaitingForGPUsToRoll",
            "True",
            id="a-fleet-short-of-its-own-replicas-is-degraded-as-well",
        ),
        pytest.param(
            [serving("n0", NEW), waits()],
            FullPoolRoll(),
            1,
            2,
            "RollingOut",
            "True",
            id="a-scale-up-short-of-gpus-is-degraded",
        ),
    ],
)
def test_a_rollout_waiting_for_gpus_reads_degraded_only_when_the_fleet_serves_too_few(
    pods: list[dict[str, Any]],
    roll: FullPoolRoll,
    ready: int,
    replicas: int,
    progressing: str,
    degraded: str,
) -> None:
    said = conditions(pods, roll, ready=ready, replicas=replicas)
    assert said["Progressing"][:2] == ("True", progressing)
    assert said["Degraded"][0] == degraded, said["Degraded"]
    # The scheduler's words stay where they belong: a pod found no node.
    assert said["ScalingLimited"][:2] == ("True", "InsufficientGPUs")
    assert said["Available"][0] == ("True" if ready else "False")


def test_the_wait_names_the_pending_pod_and_the_serving_one() -> None:
    said = conditions(
        [serving("o1"), waits("chat-tp1-5c9b-x")],
        FullPoolRoll(waiting=("chat-tp1-5c9b-x",)),
        ready=1,
        replicas=1,
    )["Progressing"][2]
    assert "chat-tp1-5c9b-x" in said
    assert "keep serving" in said
    assert "1 of 1 pods ready" in said


@pytest.mark.parametrize(
    ("before", "after", "announced"),
    [
        pytest.param(
            FullPoolRoll(),
            FullPoolRoll(one_at_a_time=True),
            "RollingOneAtATime",
            id="roll-begins",
        ),
        pytest.param(
            FullPoolRoll(),
            FullPoolRoll(waiting=("n1",)),
            "WaitingForGPUsToRoll",
            id="wait-begins",
        ),
        pytest.param(
            FullPoolRoll(waiting=("n1",)),
            FullPoolRoll(one_at_a_time=True),
            "RollingOneAtATime",
            id="a-wait-turned-roll-is-said",
        ),
        pytest.param(
            FullPoolRoll(one_at_a_time=True),
            FullPoolRoll(one_at_a_time=True, waiting=("n2",)),
            None,
            id="not-again-on-the-next-replacement",
        ),
        pytest.param(
            FullPoolRoll(waiting=("n1",)),
            FullPoolRoll(),
            None,
            id="nothing-when-it-ends",
        ),
    ],
)
def test_each_way_is_announced_once_when_it_begins(
    before: FullPoolRoll, after: FullPoolRoll, announced: str | None
) -> None:
    def status(roll: FullPoolRoll, old: LLMDeploymentStatus) -> LLMDeploymentStatus:
        observed = Observed(deployment(1, 2, 0), (), None, (), roll=roll)
        return ready_status(old=old, generation=2, plan=PAIR, observed=observed, endpoint="e")

    old = status(before, LLMDeploymentStatus())
    said = newly_announced(old, status(after, old))
    assert (said[0] if said else None) == announced
