"""Whether a Spare LLMBatchJob can start: the operator was given a spare PriorityClass (its
--spare-priority-class, the chart's priorityClasses.spare.name) and the class exists. A Spare job
never runs at normal priority instead: until both hold it waits, Running=False with the reason,
and starts with no edit once they do (the spec is immutable; the admin fixes the operator).

And what is no fault of a Spare job: its shards waiting for GPUs (`causes_of`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes import client as k8s

from llmfleet.models.batchjob_status import LLMBatchJobStatus
from llmfleet.models.status import PlanSummary
from llmfleet.reconcile.machinery.causes import INSUFFICIENT_GPUS, Blocker
from llmfleet.reconcile.machinery.conditions import FALSE, condition, keep_transition_times

from . import reasons as r

log = logging.getLogger(__name__)

CHART_VALUE = "priorityClasses.spare.name"
SPARE = "Spare"  # spec.priority


@dataclass(frozen=True)
class Waiting:
    reason: str
    message: str


class SpareClass:
    """The operator's spare PriorityClass, looked up by name (RBAC: get on that one name)."""

    def __init__(self, api: k8s.ApiClient, name: str) -> None:
        self.name = name
        self._scheduling = k8s.SchedulingV1Api(api)
        self._unreadable_said = False

    def missing(self) -> Waiting | None:
        """Why a Spare job cannot start now, or None."""
        if not self.name:
            return Waiting(
                r.SPARE_CLASS_UNSET,
                "spec.priority: Spare needs the operator's spare PriorityClass, and this operator "
                f"has none: install the chart with {CHART_VALUE} set (the operator's "
                "--spare-priority-class); the job starts then, unchanged",
            )
        if self._exists() is False:
            return Waiting(
                r.SPARE_CLASS_NOT_FOUND,
                f"spec.priority: Spare runs at PriorityClass {self.name} ({CHART_VALUE}), which "
                "does not exist: install the chart with priorityClasses.create=true, or create "
                "the class; the job starts then, unchanged",
            )
        return None

    def _exists(self) -> bool | None:
        """None when the operator may not read it: the Job controller then says what is wrong."""
        try:
            self._scheduling.read_priority_class(self.name, _request_timeout=10)
        except k8s.ApiException as e:
            if e.status == 404:
                return False
            if e.status == 403:
                if not self._unreadable_said:
                    log.warning("may not read PriorityClass %s: not checked", self.name)
                    self._unreadable_said = True
                return None
            raise
        return True


def waiting_status(
    old: LLMBatchJobStatus, generation: int, planned: PlanSummary, why: Waiting
) -> LLMBatchJobStatus:
    """Pending, not failed: nothing in the spec is wrong."""
    conds = [
        condition(r.RUNNING, FALSE, why.reason, why.message, generation),
        condition(r.PREEMPTED, FALSE, r.NOT_PREEMPTED, "no shard was preempted", generation),
        condition(r.COMPLETE, FALSE, why.reason, "the job has not started", generation),
        condition(r.FAILED, FALSE, why.reason, "the job has not started", generation),
    ]
    return old.model_copy(
        update={
            "observed_generation": generation,
            "phase": "Pending",
            "plan": planned,
            "conditions": keep_transition_times(conds, old.conditions),
        }
    )


def causes_of(blockers: Sequence[Blocker], priority: str) -> list[Blocker]:
    """What keeps a job's shards from starting, of what the scheduler and the kubelet said. A
    Spare job's shard that finds no free GPU waits Pending at the spare class until one frees,
    for hours if online serving needs them: what spare means, not a cause. As one, a Spare job
    would read Running=False InsufficientGPUs until a shard ran, and warn of the shortage while
    any shard waits, which for a Spare job is most of its life."""
    if priority != SPARE:
        return list(blockers)
    return [b for b in blockers if b.reason != INSUFFICIENT_GPUS]
