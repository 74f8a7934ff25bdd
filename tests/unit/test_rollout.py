"""A change of layout: which live engine objects count as the previous layout's, and that they keep
serving until the new engine holds its minimum replicas ready."""

from __future__ import annotations

from typing import Any

import pytest

from llmfleet.reconcile.llmdeployment.rollout import held, is_router, previous_engines
from llmfleet.render.router import COMPONENT_ROUTER
from llmfleet.render.standby import STANDBY_LABEL

COMPONENT = "app.kubernetes.io/component"


def obj(kind: str, name: str, ready: int | None = None, **labels: str) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "metadata": {"name": name, "labels": labels}}
    if ready is not None:
        out["status"] = {"readyReplicas": ready}
    return out


NEW = obj("Deployment", "chat-l2")
OLD = obj("Deployment", "chat-l1")
OLD_LWS = obj("LeaderWorkerSet", "chat-pp2")
ROUTER = obj("Deployment", "chat-router", **{COMPONENT: COMPONENT_ROUTER})
STANDBY = obj("Deployment", "chat-standby", **{STANDBY_LABEL: "true"})


@pytest.mark.parametrize(
    ("live", "engine", "previous"),
    [
        pytest.param([NEW], NEW, [], id="only-the-new-engine"),
        pytest.param([NEW, OLD, OLD_LWS], NEW, [OLD, OLD_LWS], id="both-engine-kinds"),
        # Turned off, they go at once rather than wait for the new engine.
        pytest.param([NEW, ROUTER, STANDBY], NEW, [], id="router-and-standby-are-no-engines"),
        # Same name, other kind: a Deployment replaced by a LeaderWorkerSet is a previous one.
        pytest.param(
            [obj("Deployment", "chat-pp2"), OLD_LWS],
            OLD_LWS,
            [obj("Deployment", "chat-pp2")],
            id="same-name-other-kind",
        ),
    ],
)
def test_previous_engines_are_the_live_engines_of_other_layouts(
    live: list[dict[str, Any]], engine: dict[str, Any], previous: list[dict[str, Any]]
) -> None:
    assert list(previous_engines(live, engine)) == previous


@pytest.mark.parametrize(
    ("ready", "min_replicas", "kept"),
    [
        pytest.param(None, 1, ["Deployment/chat-l1"], id="new-engine-not-applied-yet"),
        pytest.param(0, 1, ["Deployment/chat-l1"], id="new-engine-not-ready"),
        pytest.param(1, 1, [], id="new-engine-ready"),
        pytest.param(1, 2, ["Deployment/chat-l1"], id="below-its-minimum"),
        pytest.param(2, 2, [], id="at-its-minimum"),
        # Scale to zero: one ready replica still has to serve before the old layout goes.
        pytest.param(0, 0, ["Deployment/chat-l1"], id="scale-to-zero-waits-for-one"),
        pytest.param(1, 0, [], id="scale-to-zero-one-ready"),
    ],
)
def test_previous_engines_are_held_until_the_new_one_holds_its_minimum(
    ready: int | None, min_replicas: int, kept: list[str]
) -> None:
    engine = None if ready is None else obj("Deployment", "chat-l2", ready)
    assert held([OLD], engine, min_replicas) == kept


@pytest.mark.parametrize(
    ("labels", "router"),
    [
        ({COMPONENT: COMPONENT_ROUTER}, True),
        ({COMPONENT: "engine"}, False),
        ({}, False),
    ],
)
def test_the_router_is_told_apart_by_its_component_label(
    labels: dict[str, str], router: bool
) -> None:
    assert is_router(obj("Pod", "p", **labels)) is router
