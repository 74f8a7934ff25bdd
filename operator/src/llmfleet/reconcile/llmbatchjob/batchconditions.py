"""An LLMBatchJob's conditions, one function each, from one summary of what its Job and shards
show (`JobView`, built by batchstatus.batch_status). Their reasons are named in `reasons`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmfleet.models.status import Condition
from llmfleet.reconcile.machinery.causes import Blocker
from llmfleet.reconcile.machinery.causes import describe as describe_blockers
from llmfleet.reconcile.machinery.conditions import FALSE, TRUE, condition

from . import reasons as r
from .preemption import Preemption, describe


@dataclass(frozen=True)
class JobView:
    """What the conditions are computed from."""

    generation: int
    shards: int
    counts: str  # "N answered, M failed of T lines"
    complete: bool  # the Job's Complete condition is True
    failed: Mapping[str, Any] | None  # the Job's Failed condition, when True
    running: int  # shards running now
    preempted: Mapping[int, Preemption]  # shards waiting after a preemption, by index
    preemptions: int  # so far, every shard's
    preemptors: Mapping[str, str | None]  # who preempted, by victim pod uid
    restarts: int  # shard pods failed (not disrupted), every shard's
    errors: Sequence[str]  # "shard N: why", for each shard whose last pod failed
    blockers: Sequence[Blocker]  # why shards cannot start

    @property
    def ended(self) -> str | None:
        """How the job ended ("completed", "failed"), if it did."""
        return "completed" if self.complete else "failed" if self.failed else None


def complete(v: JobView) -> Condition:
    """Complete: has every line a record?"""
    g = v.generation
    if v.complete:
        message = f"every line has a record: {v.counts}"
        return condition(r.COMPLETE, TRUE, r.ALL_LINES_ANSWERED, message, g)
    if v.failed:
        return condition(r.COMPLETE, FALSE, r.JOB_FAILED, "the job failed", g)
    return condition(r.COMPLETE, FALSE, r.IN_PROGRESS, v.counts, g)


def failed(v: JobView) -> Condition:
    """Failed: did the Job fail, and why (each failed shard's last words, else the Job's)?"""
    g = v.generation
    if v.complete:
        return condition(r.FAILED, FALSE, r.JOB_COMPLETE, "no shard failed", g)
    if v.failed:
        message = "; ".join(v.errors) or str(v.failed.get("message") or "")
        reason = str(v.failed.get("reason") or r.FAILED_BY_JOB)
        return condition(r.FAILED, TRUE, reason, f"{message} ({v.counts})", g)
    return condition(r.FAILED, FALSE, r.IN_PROGRESS, "no shard failed for good", g)


def running(v: JobView) -> Condition:
    """Running: how many shards run, and why the others do not."""
    g = v.generation
    if v.ended:
        return condition(r.RUNNING, FALSE, r.FINISHED, f"the job {v.ended}", g)
    extra = f", {v.restarts} shard restart(s)" if v.restarts else ""
    running_now = f"{v.running} of {v.shards} shards running" + (
        f", {len(v.preempted)} preempted" if v.preempted else ""
    )
    # A preempted shard's pod waits for the GPUs its preemptor holds: Preempted says so.
    if v.blockers and not v.running and not v.preempted:
        message = f"{running_now}, the others cannot start: {describe_blockers(v.blockers)}"
        return condition(r.RUNNING, FALSE, v.blockers[0].reason, message, g)
    reason = r.SHARDS_RUNNING if v.running else r.SHARDS_STARTING
    if v.preempted and not v.running:
        reason = r.SHARDS_PREEMPTED
    # Named while others run too: the Warning Event for a cause is posted once, when status
    # first names it, not on every write while it lasts.
    blocked = f"; the others cannot start: {describe_blockers(v.blockers)}" if v.blockers else ""
    message = f"{running_now}: {v.counts}{extra}{blocked}"
    return condition(r.RUNNING, TRUE if v.running else FALSE, reason, message, g)


def preempted(v: JobView) -> Condition:
    """Preempted: True while shards wait after a preemption, naming who preempted them."""
    g = v.generation
    if v.ended:
        return condition(r.PREEMPTED, FALSE, r.FINISHED, f"the job {v.ended}", g)
    if v.preempted:
        return condition(
            r.PREEMPTED,
            TRUE,
            r.SHARDS_PREEMPTED,
            f"{len(v.preempted)} of {v.shards} shard(s) preempted: "
            f"{describe(v.preempted, v.preemptors)}; each resumes from its output when "
            f"a GPU frees ({v.preemptions} preemption(s) so far)",
            g,
        )
    if v.preemptions:
        message = f"every preempted shard runs again ({v.preemptions} preemption(s) so far)"
        return condition(r.PREEMPTED, FALSE, r.RESUMED, message, g)
    return condition(r.PREEMPTED, FALSE, r.NOT_PREEMPTED, "no shard was preempted", g)


def refused(reason: str, message: str, generation: int) -> list[Condition]:
    """The conditions of a job that cannot run as specified: Failed, with the refusal's reason."""
    return [
        condition(r.FAILED, TRUE, reason, message, generation),
        condition(r.RUNNING, FALSE, reason, "the job cannot run as specified", generation),
        condition(r.COMPLETE, FALSE, reason, "the job cannot run as specified", generation),
    ]
