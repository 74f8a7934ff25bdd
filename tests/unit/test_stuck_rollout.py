"""A rollout on a full GPU pool whose old pods serve nothing: which pods the engine Deployment may
replace first (no more, so a healthy fleet still rolls without downtime), the strategy rendered
for them, and what status and the Event say while it happens."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from rolloutpods import FLEET, MULTINODE, NEW, OWNER, PLAN, deployment, pod, spec

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.status import LLMDeploymentStatus, status_json
from llmfleet.planner import Plan, plan
from llmfleet.reconcile.llmdeployment.full_pool_roll import FullPoolRoll
from llmfleet.reconcile.llmdeployment.status import (
    Observed,
    newly_announced,
    ready_status,
)
from llmfleet.reconcile.llmdeployment.stuck_rollout import pods_to_replace_first
from llmfleet.render import render_fleet
from llmfleet.render.names import layout_id

WAITS = pod("chat-tp1-new", NEW, gpu_short=True)


@pytest.mark.parametrize(
    ("pods", "replaced"),
    [
        pytest.param(
            [pod("a", restarts=4, waiting="CrashLoopBackOff"), WAITS],
            ("a",),
            id="a-crash-looping-old-pod-goes-first",
        ),
        pytest.param(
            [pod("a", waiting="RunContainerError"), WAITS],
            ("a",),
            id="an-old-pod-the-kubelet-refused-goes-first",
        ),
        pytest.param(
            [pod("a", restarts=1), WAITS],
            ("a",),
            id="an-old-pod-restarted-and-not-ready-goes-first",
        ),
        pytest.param(
            [
                pod("c", restarts=2),
                pod("b", ready=True),
                pod("a", waiting="CrashLoopBackOff"),
                WAITS,
            ],
            ("a", "c"),
            id="only-the-failed-old-pods-never-the-serving-one",
        ),
        pytest.param([pod("a", ready=True), WAITS], (), id="a-serving-old-pod-waits-its-turn"),
        pytest.param(
            [pod("a", waiting="ContainerCreating"), WAITS],
            (),
            id="an-old-pod-still-starting-is-not-judged",
        ),
        pytest.param([pod("a"), WAITS], (), id="an-old-pod-loading-the-model-is-not-judged"),
        pytest.param(
            [pod("a", restarts=4, waiting="CrashLoopBackOff")],
            (),
            id="nothing-waits-for-gpus",
        ),
        pytest.param(
            [pod("a", restarts=4), pod("chat-tp1-new", NEW, cpu_short=True)],
            (),
            id="the-new-pod-waits-for-cpu-which-no-gpu-freed-would-give",
        ),
        pytest.param(
            [pod("a", NEW, restarts=4), WAITS],
            (),
            id="a-failed-pod-of-the-template-that-waits-would-come-back-the-same",
        ),
        pytest.param(
            [pod("a", restarts=4, deleting=True), WAITS],
            (),
            id="a-pod-already-going-is-not-counted",
        ),
        pytest.param(
            [pod("a", restarts=4, layout="tp2"), WAITS],
            (),
            id="a-previous-layouts-pod-is-its-own-deployments",
        ),
        pytest.param(
            [pod("a", gpu_short=True), WAITS],
            (),
            id="an-old-pod-that-holds-no-gpu-frees-none",
        ),
    ],
)
def test_the_pods_replaced_first_serve_nothing_and_hold_gpus_new_pods_wait_for(
    pods: list[dict[str, Any]], replaced: tuple[str, ...]
) -> None:
    assert pods_to_replace_first(pods, PLAN) == replaced


def test_a_multi_node_layout_is_left_to_its_leaderworkerset() -> None:
    multinode = plan(
        LLMDeploymentSpec.model_validate(yaml.safe_load(MULTINODE.read_text())["spec"])
    )
    assert multinode.pipeline_parallel_size > 1
    layout = layout_id(multinode)
    pods = [
        pod("a", restarts=4, layout=layout),
        pod("n", NEW, gpu_short=True, layout=layout),
    ]
    assert pods_to_replace_first(pods, multinode) == ()


def engine_deployment(p: Plan, replace_first: int) -> dict[str, Any]:
    objects = render_fleet(OWNER, spec(), p, FLEET, replace_first=replace_first).objects()
    (engine,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-tp1"
    ]
    return engine


@pytest.mark.parametrize(
    ("replace_first", "surge", "unavailable"),
    [
        pytest.param(0, 1, 0, id="healthy-fleet-surges-and-never-drops-a-serving-pod"),
        pytest.param(1, 0, 1, id="one-pod-serving-nothing-is-replaced-in-place"),
        pytest.param(3, 0, 3, id="as-many-as-serve-nothing-and-no-more"),
    ],
)
def test_the_engine_deployment_replaces_only_what_serves_nothing_first(
    replace_first: int, surge: int, unavailable: int
) -> None:
    rolling = engine_deployment(PLAN, replace_first)["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (surge, unavailable)


def test_changing_the_strategy_restarts_no_pod() -> None:
    """The strategy is outside the pod template: switching it rolls nothing by itself."""
    calm, stuck = engine_deployment(PLAN, 0), engine_deployment(PLAN, 2)
    assert calm["spec"]["template"] == stuck["spec"]["template"]
    assert calm["spec"]["strategy"] != stuck["spec"]["strategy"]


def status(replacing: tuple[str, ...], old: LLMDeploymentStatus | None = None) -> Any:
    roll = FullPoolRoll(replace_first=replacing)
    observed = Observed(deployment(0, 1, 1), (), None, (WAITS,), roll=roll)
    return ready_status(
        old=old or LLMDeploymentStatus(),
        generation=2,
        plan=PLAN,
        observed=observed,
        endpoint="e",
    )


def progressing(s: LLMDeploymentStatus) -> dict[str, Any]:
    (found,) = [c for c in status_json(s)["conditions"] if c["type"] == "Progressing"]
    return dict(found)


def test_progressing_names_the_pods_replaced_first_and_why() -> None:
    said = progressing(status(("chat-tp1-a", "chat-tp1-b")))
    assert (said["status"], said["reason"]) == ("True", "ReplacingUnservingPods")
    assert "no GPU is free" in said["message"]
    assert said["message"].endswith("chat-tp1-a, chat-tp1-b")


def test_progressing_without_pods_to_replace_is_the_usual_rollout() -> None:
    said = progressing(status(()))
    assert (said["status"], said["reason"]) == ("True", "RollingOut")


@pytest.mark.parametrize(
    ("before", "after", "announced"),
    [
        pytest.param((), ("a",), True, id="announced-when-it-starts"),
        pytest.param(("a",), ("a",), False, id="not-again-on-every-resync"),
        pytest.param(("a",), ("a", "b"), False, id="not-again-when-another-pod-joins"),
        pytest.param(("a",), (), False, id="nothing-when-it-ends"),
    ],
)
def test_the_event_says_it_once(
    before: tuple[str, ...], after: tuple[str, ...], announced: bool
) -> None:
    old = status(before)
    new = status(after, old)
    said = newly_announced(old, new)
    assert (said is not None) == announced
    if announced:
        assert said == ("ReplacingUnservingPods", progressing(new)["message"])
