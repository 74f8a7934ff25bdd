"""An LLMBatchJob's status from what the cluster shows: pure functions from its Job and pods (and
what the shards report) to the typed status, so that it can be tested without a cluster. Its
conditions are computed in `batchconditions`, one function each."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.models.batchjob_status import JobPhase, LLMBatchJobStatus, ShardPhase, ShardStatus
from llmfleet.models.status import PlanSummary
from llmfleet.reconcile.machinery.causes import Blocker
from llmfleet.reconcile.machinery.conditions import TRUE, keep_transition_times
from llmfleet.render.batchjob import output_key
from llmfleet.shard_report import ShardReport, parse_metrics, parse_summary

from . import batchconditions as conditions
from .batchconditions import JobView
from .batchpods import held_seconds, parse_time, runner_end, shard_index
from .preemption import (
    Preemption,
    disruption,
    preempted_now,
    preemption,
    still_preempted,
)

Scraper = Callable[[str], str | None]


@dataclass(frozen=True)
class ShardObservation:
    index: int
    phase: ShardPhase
    report: ShardReport | None
    restarts: int
    error: str | None = None  # why its last pod failed, when it did
    preemptions: int = 0
    preempted_by: Preemption | None = None  # while the shard waits after a preemption


def observe_shards(  # noqa: PLR0917 - pure, called once, every input named at the call
    shards: int,
    pods: list[dict[str, Any]],
    completed: set[int],
    failed_for_good: set[int],
    scraper: Scraper,
    previous: dict[int, ShardStatus],
) -> list[ShardObservation]:
    """Each shard's phase and latest counts: from its newest pod (scraped while it runs, its
    termination message once it ended), else the counts status last showed."""
    by_index: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        index = shard_index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    running_ips = sorted(
        {
            str((p.get("status") or {}).get("podIP"))
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and (p.get("status") or {}).get("podIP")
            and runner_end(p) is None
        }
    )
    # Shards are scraped at once: a reconcile waits for the slowest, not for their sum.
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(running_ips)))) as pool:
        pages = dict(zip(running_ips, pool.map(scraper, running_ips), strict=True))
    out = []
    for index in range(shards):
        mine = sorted(
            by_index.get(index, []),
            key=lambda p: str(p["metadata"].get("creationTimestamp") or ""),
        )
        # What the Job counts against backoffLimitPerIndex: disruptions are not failures.
        restarts = sum(
            1
            for p in mine
            if (p.get("status") or {}).get("phase") == "Failed" and disruption(p) is None
        )
        report: ShardReport | None = None
        error: str | None = None
        phase: ShardPhase = "Succeeded" if index in completed else "Pending"
        for pod in reversed(mine):
            status = pod.get("status") or {}
            terminated = runner_end(pod)
            if terminated is not None:
                report = parse_summary(terminated.get("message"))
                if error is None and int(terminated.get("exitCode") or 0) != 0:
                    error = _failure(terminated, report)
            elif status.get("phase") == "Running" and status.get("podIP"):
                text = pages.get(str(status["podIP"]))
                report = parse_metrics(text) if text else None
            if report is not None:
                break
        victim = preempted_now(mine) if index not in completed else None
        last = previous.get(index)
        if victim is None and index not in completed and last is not None:
            victim = still_preempted(mine, last.phase == "Preempted", last.preempted_by)
        if index in failed_for_good:
            phase = "Failed"
        elif victim is not None:
            phase = "Preempted"
        elif mine and index not in completed:
            newest = (mine[-1].get("status") or {}).get("phase")
            if newest == "Running":
                phase = "Running"
            elif newest == "Succeeded":
                phase = "Succeeded"
            else:
                # Being replaced after a failure (the index is not failed for good), not started,
                # or on a node that stopped reporting (phase Unknown): not known to run.
                phase = "Pending"
        if report is None and last is not None and last.total is not None:
            report = ShardReport(
                shard=index,
                shards=shards,
                total=last.total,
                succeeded=last.succeeded,
                failed=last.failed,
                redone=last.lines_redone,
            )
        # Pods of a long job may be gone (pod garbage collection): never count fewer than before.
        preemptions = max(
            sum(1 for p in mine if preemption(p) is not None), last.preemptions if last else 0
        )
        out.append(
            ShardObservation(
                index,
                phase,
                report,
                restarts,
                error,
                preemptions,
                victim if phase == "Preempted" else None,
            )
        )
    return out


def gpu_seconds(
    old: LLMBatchJobStatus, pods: Sequence[Mapping[str, Any]], gpus: int, at: datetime
) -> dict[str, Any]:
    """gpuSeconds and gpuSecondsAt: what the listed pods held since the last count, added to it.
    Kubernetes deletes pods (a preempted one as soon as it stopped, the rest at pod garbage
    collection), so a sum over the pods listed now would forget theirs. Unchanged while no pod
    holds a GPU, so a waiting job writes nothing."""
    if old.gpu_seconds_at is None:
        # The first count (or a status from before gpuSecondsAt): every pod from its start.
        total = max(old.gpu_seconds, round(gpus * sum(held_seconds(p, at) for p in pods)))
        return {"gpu_seconds": total, "gpu_seconds_at": at if total else None}
    added = round(gpus * sum(held_seconds(p, at, since=old.gpu_seconds_at) for p in pods))
    if added < 1:
        return {"gpu_seconds": old.gpu_seconds, "gpu_seconds_at": old.gpu_seconds_at}
    return {"gpu_seconds": old.gpu_seconds + added, "gpu_seconds_at": at}


def _failure(terminated: dict[str, Any], report: ShardReport | None) -> str:
    """Why a runner container failed: its own words, else the last line of its log."""
    if report is not None and report.error:
        return report.error
    lines = [line for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    code = terminated.get("exitCode")
    return f"exit code {code}" + (f": {lines[-1].strip()[:512]}" if lines else "")


def _format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _job_condition(job: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == TRUE:
            found: dict[str, Any] = c
            return found
    return None


def batch_status(
    *,
    old: LLMBatchJobStatus,
    generation: int,
    planned: PlanSummary,
    shards: int,
    job: dict[str, Any] | None,
    observed: list[ShardObservation],
    at: datetime | None = None,
    blockers: Sequence[Blocker] = (),
    preemptors: Mapping[str, str | None] | None = None,
    pods: Sequence[Mapping[str, Any]] = (),
) -> LLMBatchJobStatus:
    """The status of a job whose Job exists (or is about to): counts, rate, ETA, conditions;
    `blockers` say why shards cannot start (a missing input or output), `preemptors` who
    preempted a victim pod (by uid; `preemption.preemptor_of`), `pods` the shard pods, for the
    GPU-seconds they held."""
    at = at or datetime.now(UTC)
    g = generation
    reports = [o.report for o in observed]
    known = [r for r in reports if r is not None]
    total = sum(r.total for r in known) if len(known) == shards else None
    succeeded = sum(r.succeeded for r in known)
    failed = sum(r.failed for r in known)
    done = succeeded + failed
    running = [o for o in observed if o.phase == "Running"]
    rate = sum(o.report.tokens_per_second for o in running if o.report is not None)
    job_status = (job or {}).get("status") or {}
    start = parse_time(job_status.get("startTime"))
    complete = _job_condition(job, "Complete")
    failed_cond = _job_condition(job, "Failed")

    # Until every shard has started (spec.parallelism below shards) the total is estimated from
    # those that have: lines go round-robin, so shards' totals differ by at most one.
    estimate = round(sum(r.total for r in known) * shards / len(known)) if known else None
    whole = total if total is not None else estimate
    eta: str | None = None
    if whole is not None and start is not None and not complete and not failed_cond and done:
        elapsed = (at - start).total_seconds()
        if elapsed > 0 and whole > done:
            eta = _format_duration((whole - done) * elapsed / done)
    progress = None
    if whole is not None:
        percent = min(100, 100 * done // whole) if whole else 100
        progress = f"{done}/{'' if total is not None else '~'}{whole} ({percent}%)"

    counts = f"{succeeded} answered, {failed} failed" + (f" of {total} lines" if total else "")
    preempted = {o.index: o.preempted_by for o in observed if o.preempted_by is not None}
    preemptions = sum(o.preemptions for o in observed)
    phase: JobPhase
    if complete:
        phase = "Complete"
    elif failed_cond:
        phase = "Failed"
    else:
        phase = "Preempted" if preempted else "Running" if running else "Pending"
    view = JobView(
        generation=g,
        shards=shards,
        counts=counts,
        complete=complete is not None,
        failed=failed_cond,
        running=len(running),
        preempted=preempted,
        preemptions=preemptions,
        preemptors=preemptors or {},
        restarts=sum(o.restarts for o in observed),
        errors=sorted({f"shard {o.index}: {o.error}" for o in observed if o.error}),
        blockers=blockers,
    )
    conds = [
        conditions.complete(view),
        conditions.failed(view),
        conditions.running(view),
        conditions.preempted(view),
    ]
    return LLMBatchJobStatus(
        observed_generation=g,
        conditions=keep_transition_times(conds, old.conditions),
        phase=phase,
        plan=planned,
        job_name=(job or {}).get("metadata", {}).get("name"),
        shards=shards,
        running_shards=len(running),
        total=total,
        succeeded=succeeded,
        failed=failed,
        progress=progress,
        prompt_tokens=sum(r.prompt_tokens for r in known),
        completion_tokens=sum(r.completion_tokens for r in known),
        preemptions=preemptions,
        lines_redone=sum(r.redone for r in known),
        **gpu_seconds(old, pods, planned.gpus_per_replica, at),
        tokens_per_second=round(rate, 1) if running else None,
        eta=eta,
        start_time=start,
        completion_time=parse_time(
            job_status.get("completionTime") or (failed_cond or {}).get("lastTransitionTime")
        ),
        shard_status=tuple(
            ShardStatus(
                index=o.index,
                phase=o.phase,
                total=o.report.total if o.report else None,
                succeeded=o.report.succeeded if o.report else 0,
                failed=o.report.failed if o.report else 0,
                tokens_per_second=round(o.report.tokens_per_second, 1)
                if o.report and o.phase == "Running"
                else None,
                restarts=o.restarts,
                preemptions=o.preemptions,
                # Only while preempted: a shard that never was keeps the members it had.
                **(
                    {
                        "preempted_by": (preemptors or {}).get(o.preempted_by.uid)
                        or o.preempted_by.said
                    }
                    if o.preempted_by
                    else {}
                ),
                lines_redone=o.report.redone if o.report else 0,
            )
            for o in observed
        ),
    )


def refused_status(
    old: LLMBatchJobStatus, generation: int, reason: str, message: str
) -> LLMBatchJobStatus:
    conds = conditions.refused(reason, message, generation)
    return old.model_copy(
        update={
            "observed_generation": generation,
            "phase": "Failed",
            "conditions": keep_transition_times(conds, old.conditions),
        }
    )


def output_conflict(
    body: dict[str, Any], spec: LLMBatchJobSpec, others: list[dict[str, Any]]
) -> str | None:
    """Why `body` may not write its output: an older LLMBatchJob writes the same claim and path."""
    mine = output_key(spec.output.persistent_volume_claim)
    me = (str(body["metadata"].get("creationTimestamp") or ""), body["metadata"]["name"])
    for other in others:
        meta = other.get("metadata") or {}
        if meta.get("name") == body["metadata"]["name"] or meta.get("deletionTimestamp"):
            continue
        claim = (((other.get("spec") or {}).get("output") or {}).get("persistentVolumeClaim")) or {}
        if not claim.get("claimName") or not claim.get("path"):
            continue
        key = (str(claim["claimName"]), posixpath.normpath(str(claim["path"])))
        them = (str(meta.get("creationTimestamp") or ""), str(meta.get("name")))
        if key == mine and them < me:
            return (
                f"spec.output.persistentVolumeClaim: claim {mine[0]} path {mine[1]} is the output "
                f"of LLMBatchJob {meta.get('name')}; choose another path"
            )
    return None


def indexes(text: Any) -> set[int]:
    """A Job's completedIndexes, e.g. "0,2-4", as a set."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        with contextlib.suppress(ValueError):
            out.update(range(int(low), int(high or low) + 1))
    return out
