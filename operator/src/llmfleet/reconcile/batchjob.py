"""One idempotent reconcile of an LLMBatchJob: validate, plan, refuse an output another job
writes, create its Indexed Job (server-side apply, owner reference), then read the shards'
progress (the running pods' /metrics, the finished pods' termination messages) into status,
written once and only when it changed.

A Job's pod template is immutable, and so is an LLMBatchJob's spec (CEL), so the Job is applied
when it is missing and otherwise only observed. A Job deleted before the batch finished is
created again and resumes from the output files.
"""

from __future__ import annotations

import contextlib
import posixpath
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from llmfleet.models.batchjob import (
    KIND,
    JobPhase,
    LLMBatchJobSpec,
    LLMBatchJobStatus,
    ShardPhase,
    ShardStatus,
)
from llmfleet.models.profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.models.status import PlanSummary
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.reconcile.apply import ApplyResult
from llmfleet.reconcile.base import Reconciler, generation
from llmfleet.reconcile.cache import ChildView
from llmfleet.reconcile.conditions import FALSE, TRUE, condition, find, keep_transition_times
from llmfleet.reconcile.resync import Resyncer
from llmfleet.render.batchjob import (
    BATCHJOB_LABEL,
    CONTAINER,
    BatchOwner,
    job_name,
    output_key,
    render_batch_job,
    shard_count,
)
from llmfleet.shard_report import METRICS_PORT, ShardReport, parse_metrics, parse_summary

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SCRAPE_TIMEOUT_SECONDS = 2.0
# How often running jobs' progress is read (their pods change no object while they work).
POLL_SECONDS = 10.0
FINISHED = ("Complete", "Failed")

Scraper = Callable[[str], str | None]


def scrape(pod_ip: str) -> str | None:
    """The runner's /metrics page, or None when it does not answer (yet)."""
    url = f"http://{pod_ip}:{METRICS_PORT}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_SECONDS) as r:
            text: str = r.read().decode()
            return text
    except (OSError, ValueError):
        return None


# --- pure status computation ---------------------------------------------------------------------


@dataclass(frozen=True)
class ShardObservation:
    index: int
    phase: ShardPhase
    report: ShardReport | None
    restarts: int
    error: str | None = None  # why its last pod failed, when it did


def _index(pod: dict[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(
        INDEX_ANNOTATION
    )
    return int(value) if value is not None and str(value).isdigit() else None


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            state = cs.get("state") or {}
            if "terminated" in state:
                terminated: dict[str, Any] = state["terminated"]
                return terminated
    return None


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
        index = _index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    running_ips = sorted(
        {
            str((p.get("status") or {}).get("podIP"))
            for p in pods
            if (p.get("status") or {}).get("phase") == "Running"
            and (p.get("status") or {}).get("podIP")
            and _terminated(p) is None
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
        restarts = sum(1 for p in mine if (p.get("status") or {}).get("phase") == "Failed")
        report: ShardReport | None = None
        error: str | None = None
        phase: ShardPhase = "Succeeded" if index in completed else "Pending"
        for pod in reversed(mine):
            status = pod.get("status") or {}
            terminated = _terminated(pod)
            if terminated is not None:
                report = parse_summary(terminated.get("message"))
                if error is None and int(terminated.get("exitCode") or 0) != 0:
                    error = _failure(terminated, report)
            elif status.get("phase") == "Running" and status.get("podIP"):
                text = pages.get(str(status["podIP"]))
                report = parse_metrics(text) if text else None
            if report is not None:
                break
        if index in failed_for_good:
            phase = "Failed"
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
        last = previous.get(index)
        if report is None and last is not None and last.total is not None:
            report = ShardReport(
                shard=index,
                shards=shards,
                total=last.total,
                succeeded=last.succeeded,
                failed=last.failed,
            )
        out.append(ShardObservation(index, phase, report, restarts, error))
    return out


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


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
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
) -> LLMBatchJobStatus:
    """The status of a job whose Job exists (or is about to): counts, rate, ETA, conditions."""
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
    start = _parse_time(job_status.get("startTime"))
    complete = _job_condition(job, "Complete")
    failed_cond = _job_condition(job, "Failed")

    eta: str | None = None
    if total is not None and start is not None and not complete and not failed_cond and done:
        elapsed = (at - start).total_seconds()
        if elapsed > 0 and total > done:
            eta = _format_duration((total - done) * elapsed / done)
    progress = None
    if total is not None:
        percent = 100 * done // total if total else 100
        progress = f"{done}/{total} ({percent}%)"

    counts = f"{succeeded} answered, {failed} failed" + (f" of {total} lines" if total else "")
    phase: JobPhase
    if complete:
        phase = "Complete"
        conds = [
            condition(
                "Complete", TRUE, "AllLinesAnswered", f"every line has a record: {counts}", g
            ),
            condition("Running", FALSE, "Finished", "the job completed", g),
            condition("Failed", FALSE, "Complete", "no shard failed", g),
        ]
    elif failed_cond:
        phase = "Failed"
        errors = sorted({f"shard {o.index}: {o.error}" for o in observed if o.error})
        message = "; ".join(errors) or str(failed_cond.get("message") or "")
        reason = str(failed_cond.get("reason") or "JobFailed")
        conds = [
            condition("Failed", TRUE, reason, f"{message} ({counts})", g),
            condition("Running", FALSE, "Finished", "the job failed", g),
            condition("Complete", FALSE, "Failed", "the job failed", g),
        ]
    else:
        phase = "Running" if running else "Pending"
        restarts = sum(o.restarts for o in observed)
        extra = f", {restarts} shard restart(s)" if restarts else ""
        conds = [
            condition(
                "Running",
                TRUE if running else FALSE,
                "ShardsRunning" if running else "ShardsStarting",
                f"{len(running)} of {shards} shards running: {counts}{extra}",
                g,
            ),
            condition("Complete", FALSE, "InProgress", f"{counts}", g),
            condition("Failed", FALSE, "InProgress", "no shard failed for good", g),
        ]
    return LLMBatchJobStatus(
        observed_generation=g,
        conditions=keep_transition_times(conds, old.conditions),
        phase=phase,
        plan=planned,
        job_name=(job or {}).get("metadata", {}).get("name"),
        shards=shards,
        total=total,
        succeeded=succeeded,
        failed=failed,
        progress=progress,
        prompt_tokens=sum(r.prompt_tokens for r in known),
        completion_tokens=sum(r.completion_tokens for r in known),
        tokens_per_second=round(rate, 1) if running else None,
        eta=eta,
        start_time=start,
        completion_time=_parse_time(
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
            )
            for o in observed
        ),
    )


def refused_status(
    old: LLMBatchJobStatus, generation: int, reason: str, message: str
) -> LLMBatchJobStatus:
    conds = [
        condition("Failed", TRUE, reason, message, generation),
        condition("Running", FALSE, reason, "the job cannot run as specified", generation),
        condition("Complete", FALSE, reason, "the job cannot run as specified", generation),
    ]
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


# --- the controller ------------------------------------------------------------------------------


class BatchJobController(Reconciler[LLMBatchJobSpec, LLMBatchJobStatus]):
    kind = KIND
    spec_model = LLMBatchJobSpec
    status_model = LLMBatchJobStatus

    def __init__(
        self,
        api: k8s.ApiClient,
        profiles: GpuProfiles = DEFAULT_GPU_PROFILES,
        scraper: Scraper = scrape,
        view: ChildView | None = None,
    ) -> None:
        super().__init__(api, profiles, view)
        self.scraper = scraper
        self._active: set[tuple[str, str]] = set()  # jobs whose progress is polled
        self._poller: Resyncer | None = None

    def plan(self, spec: LLMBatchJobSpec) -> Plan:
        planned = plan(spec.deployment_spec(), self.profiles)
        if planned.pipeline_parallel_size > 1:
            raise PlanError(
                "spec.gpus",
                f"{planned.reason} An LLMBatchJob runs each shard as one pod on one node; a "
                "model larger than a node needs fp8 (spec.model.quantization) or larger GPUs, "
                "or an LLMDeployment (which spans nodes) to send the requests to.",
                reason="MultiNodeNotSupported",
            )
        return planned

    def refused_status(
        self, old: LLMBatchJobStatus, generation: int, reason: str, message: str
    ) -> LLMBatchJobStatus:
        return refused_status(old, generation, reason, message)

    def refused(
        self, namespace: str, name: str, new: LLMBatchJobStatus, spec: LLMBatchJobSpec | None
    ) -> None:
        self.forget(namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        with self._guard:
            self._active.discard((namespace, name))

    def run(
        self, body: dict[str, Any], old: LLMBatchJobStatus, spec: LLMBatchJobSpec, planned: Plan
    ) -> ApplyResult:
        meta = body["metadata"]
        ns, name = meta["namespace"], meta["name"]
        conflict = output_conflict(body, spec, self.applier.list(self.api_version, KIND, ns, ""))
        if conflict:
            self.refuse(body, old, "OutputConflict", conflict, spec)

        owner = BatchOwner(name=name, namespace=ns, uid=meta["uid"])
        result = ApplyResult()
        shards = shard_count(spec, planned)
        job = self.view.get("batch/v1", "Job", ns, job_name(name))
        finished = old.job_name and old.phase in FINISHED
        if job is None and not finished:
            job = self.applier.apply(render_batch_job(owner, spec, planned), result)
        pods = self.view.by_label("v1", "Pod", ns, BATCHJOB_LABEL, name)
        if job is not None and self._release_from_terminating_namespace(ns, job, pods, result):
            pods = []
        job_status = (job or {}).get("status") or {}
        completed = _indexes(job_status.get("completedIndexes"))
        failed_for_good = _indexes(job_status.get("failedIndexes"))
        previous = {s.index: s for s in old.shard_status}
        observed = observe_shards(shards, pods, completed, failed_for_good, self.scraper, previous)
        new = batch_status(
            old=old,
            generation=generation(body),
            planned=planned.summary(),
            shards=shards,
            job=job,
            observed=observed,
        )
        if result.created:
            self.events.emit(
                body, "Normal", "Created", f"Job {job_name(name)} with {shards} shard(s)"
            )
        if self.write_status(body, new) and old.phase != new.phase:
            if new.phase == "Complete":
                self.events.emit(body, "Normal", "Complete", _message(new, "Complete"))
            elif new.phase == "Failed":
                self.events.emit(body, "Warning", "Failed", _message(new, "Failed"))
        with self._guard:
            if new.phase in FINISHED:
                self._active.discard((ns, name))
            else:
                self._active.add((ns, name))
        return result

    def _release_from_terminating_namespace(
        self, ns: str, job: dict[str, Any], pods: list[dict[str, Any]], result: ApplyResult
    ) -> bool:
        """Delete the Job when its namespace is being deleted; whether it did.

        Kubernetes deletes a terminating namespace's pods first and waits for them to go. A Job's
        pods keep the Job controller's tracking finalizer until it has counted them, and a pod
        that never ran is not counted while the namespace refuses its replacement: the namespace
        stays Terminating for good. Deleting the Job releases its pods. Asked only once pods are
        being deleted while the Job is not, so a running job costs nothing."""
        if job["metadata"].get("deletionTimestamp") or not any(
            p["metadata"].get("deletionTimestamp") for p in pods
        ):
            return False
        if not self.events.namespace_terminating(ns):
            return False
        if self.applier.delete("batch/v1", "Job", ns, job["metadata"]["name"]):
            result.deleted.append(f"Job/{job['metadata']['name']}")
        return True

    # --- polling of running jobs ---------------------------------------------------------------

    def active(self) -> list[tuple[str, str]]:
        with self._guard:
            return sorted(self._active)

    def start_polling(self, interval: float = POLL_SECONDS) -> None:
        """Re-read running jobs' progress every `interval` seconds (a thread; `stop_polling`)."""
        self._poller = Resyncer("batch-poll", self.active, self.reconcile_by_name, interval)
        self._poller.start()

    def polling(self) -> bool:
        return self._poller is not None and self._poller.alive()

    def stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.stop()


def _message(status: LLMBatchJobStatus, ctype: str) -> str:
    found = find(status.conditions, ctype)
    return found.message if found is not None else ""


def _indexes(text: Any) -> set[int]:
    """A Job's completedIndexes, e.g. "0,2-4", as a set."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        with contextlib.suppress(ValueError):
            out.update(range(int(low), int(high or low) + 1))
    return out
