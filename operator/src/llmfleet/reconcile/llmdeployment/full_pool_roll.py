"""How a rollout proceeds when the new template's pods wait Pending for GPUs that the earlier
template's pods hold (a full pool). Three ways, decided from the pods and the live engine
Deployment alone, so the same observation gives the same answer on every reconcile and after a
restart of the operator:

- pods of an earlier template serve nothing: they are replaced first (stuck_rollout.py);
- every earlier pod serves and 2 or more do, in a Deployment of 2 or more replicas: the pods are
  replaced one at a time in place (maxSurge 0, maxUnavailable 1), the disruption the fleet's
  PodDisruptionBudget accepts. The Deployment controller keeps replicas - 1 available
  throughout (rolling.go, reconcileOldReplicaSets: it scales old pods down only down to
  minAvailable), so at least one pod serves;
- otherwise (one replica, or fewer than 2 serving) the rollout keeps surging and waits for a
  GPU: replacing the one serving pod in place would stop serving.

"Serving" is what stuck_rollout.serves_nothing reads too: the pod is Ready.

Between two replacements no pod may wait for a GPU (the freed one went to the new pod, which
is starting). Judged afresh there the fleet would surge again, and flip back once the surge pod
waits: so the roll, once begun, goes on while the Deployment carries its mark
(render/rollout_strategy.ONE_AT_A_TIME_ANNOTATION) and the roll is not over: pods of more than
one template remain (those going too: they hold GPUs until gone), or one still waits for the
GPU a replaced pod frees. A LeaderWorkerSet layout is left to its own strategy: it waits."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmfleet.planner import Plan
from llmfleet.reconcile.machinery.causes import Blocker
from llmfleet.reconcile.machinery.object_fields import int_field
from llmfleet.render.rollout_strategy import ONE_AT_A_TIME_ANNOTATION

from .stuck_rollout import (
    bound,
    deleting,
    layout_engines,
    pods_to_replace_first,
    ready,
    short_of_gpus,
    template,
)

# Fewer serving pods than this and a replacement in place would stop serving.
MIN_SERVING_TO_ROLL = 2


@dataclass(frozen=True)
class FullPoolRoll:
    """What the reconcile renders and reports for a rollout on a full GPU pool."""

    # Pods of an earlier template that serve nothing and hold the GPUs new pods wait for.
    replace_first: tuple[str, ...] = ()
    # A healthy fleet replaced one pod at a time in place.
    one_at_a_time: bool = False
    # Pods of the rollout Pending for GPUs that pods being replaced hold, sorted: the roll's
    # wait, not a shortfall of the fleet's capacity.
    waiting: tuple[str, ...] = ()


NO_ROLL = FullPoolRoll()


def full_pool_roll(
    pods: Iterable[dict[str, Any]], plan: Plan, engine: dict[str, Any] | None
) -> FullPoolRoll:
    """The rollout of `engine` (the live engine Deployment; None before it exists) given its
    pods."""
    if plan.pipeline_parallel_size > 1:
        return NO_ROLL
    engines = layout_engines(pods, plan)
    replace_first = pods_to_replace_first(engines, plan)
    staying = [p for p in engines if not deleting(p)]
    short = [p for p in staying if short_of_gpus(p)]
    held = {template(p) for p in engines if bound(p)}
    # Waiting for GPUs that pods of another template hold: a rollout's new pods.
    rolling = [p for p in short if held - {template(p)}]
    new = {template(p) for p in rolling}
    earlier = [p for p in staying if template(p) not in new]
    replicas = int_field(engine, "spec", "replicas")
    begins = (
        bool(rolling)
        and all(ready(p) for p in earlier)
        and sum(1 for p in staying if ready(p)) >= MIN_SERVING_TO_ROLL
    )
    marked = ONE_AT_A_TIME_ANNOTATION in (
        ((engine or {}).get("metadata") or {}).get("annotations") or {}
    )
    goes_on = marked and (len({template(p) for p in engines}) > 1 or bool(short))
    one_at_a_time = not replace_first and replicas >= MIN_SERVING_TO_ROLL and (begins or goes_on)
    waiting = short if one_at_a_time else rolling
    return FullPoolRoll(
        replace_first=replace_first,
        one_at_a_time=one_at_a_time,
        waiting=tuple(sorted(p["metadata"]["name"] for p in waiting)),
    )


def roll_waits(roll: FullPoolRoll, ready_replicas: int, desired: int) -> frozenset[str]:
    """The pods of `roll.waiting` that the fleet does not miss: it serves its desired replicas
    (less the one a roll one at a time takes out). Below that the GPUs are short for the fleet,
    and the pods say so in Degraded like any pod the scheduler cannot place."""
    allowance = 1 if roll.one_at_a_time else 0
    return frozenset(roll.waiting) if ready_replicas >= desired - allowance else frozenset()


def without(blockers: Iterable[Blocker], pods: frozenset[str]) -> tuple[Blocker, ...]:
    """The blockers of pods other than `pods`."""
    return tuple(b for b in blockers if b.pod not in pods)
