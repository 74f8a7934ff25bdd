"""One idempotent reconcile of an LLMBatchJob: validate, plan, refuse an output another job
writes, create its Indexed Job (server-side apply, owner reference), then read the shards'
progress (the running pods' /metrics, the finished pods' termination messages) into status,
written once and only when it changed.

A Job's pod template is immutable, and so is an LLMBatchJob's spec (CEL), so the Job is applied
when it is missing and otherwise only observed. A Job deleted before the batch finished is
created again and resumes from the output files. A Spare job's Job is created only once the
operator's spare PriorityClass is configured and exists (reconcile/llmbatchjob/spare.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from llmfleet import metrics_batch
from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.models.batchjob import KIND, LLMBatchJobSpec
from llmfleet.models.batchjob_status import LLMBatchJobStatus
from llmfleet.planner import Plan, PlanError, plan
from llmfleet.reconcile.machinery.apply import ApplyResult
from llmfleet.reconcile.machinery.base import Reconciler, generation
from llmfleet.reconcile.machinery.cache import ChildView
from llmfleet.reconcile.machinery.conditions import find
from llmfleet.reconcile.machinery.modelconfig import ModelConfigs
from llmfleet.reconcile.machinery.podcall import read_page
from llmfleet.reconcile.machinery.references import batch_references
from llmfleet.reconcile.machinery.resync import Resyncer
from llmfleet.render import FleetDefaults
from llmfleet.render.batchjob import (
    BATCHJOB_LABEL,
    BatchOwner,
    job_name,
    parallelism,
    render_batch_job,
    shard_count,
)
from llmfleet.shard_report import METRICS_PORT

from . import reasons as r
from .batchpods import parse_time
from .batchstatus import (
    Scraper,
    ShardObservation,
    batch_status,
    indexes,
    observe_shards,
    output_conflict,
    refused_status,
)
from .preemption import preemptor
from .spare import SPARE, SpareClass, causes_of, waiting_status

SCRAPE_TIMEOUT_SECONDS = 2.0
# The runner's page holds a few counters per shard; far larger is not the runner.
MAX_PAGE_BYTES = 1 << 20
# How often running jobs' progress is read (their pods change no object while they work).
POLL_SECONDS = 10.0
FINISHED = ("Complete", "Failed")
# The scheduler posts its Preempted Event as it deletes the victim: one not found this soon after
# may still come, one not found later is gone (Events expire) and is not asked for again.
PREEMPTOR_EVENT_SECONDS = 120.0


def scrape(pod_ip: str) -> str | None:
    """The runner's /metrics page, or None when it does not answer (yet)."""
    return read_page(pod_ip, METRICS_PORT, "/metrics", SCRAPE_TIMEOUT_SECONDS, MAX_PAGE_BYTES)


# --- the controller ------------------------------------------------------------------------------


class BatchJobController(Reconciler[LLMBatchJobSpec, LLMBatchJobStatus]):
    kind = KIND
    spec_model = LLMBatchJobSpec
    status_model = LLMBatchJobStatus

    def __init__(
        self,
        api: k8s.ApiClient,
        fleet: FleetDefaults,
        profiles: GpuProfiles = DEFAULT_GPU_PROFILES,
        *,
        scraper: Scraper = scrape,
        view: ChildView | None = None,
        model_configs: ModelConfigs | None = None,
    ) -> None:
        """`fleet.spare_priority_class`: the operator's --spare-priority-class, the
        PriorityClass of Spare jobs' pods ("" refuses to start them)."""
        super().__init__(api, profiles, view, model_configs)
        self.fleet = fleet
        self.scraper = scraper
        self.spare = SpareClass(api, fleet.spare_priority_class)
        self._active: set[tuple[str, str]] = set()  # jobs whose progress is polled
        self._poller: Resyncer | None = None
        # Per job, victim pod uid -> who preempted it.
        self._preemptors: dict[tuple[str, str], dict[str, str]] = {}

    def plan(self, spec: LLMBatchJobSpec, namespace: str) -> Plan:
        config = self.model_configs.for_model(spec.model, namespace)
        planned = plan(spec.deployment_spec(), self.profiles, config)
        if planned.pipeline_parallel_size > 1:
            raise PlanError(
                "spec.gpus",
                f"{planned.reason} An LLMBatchJob runs each shard as one pod on one node; a "
                "model larger than a node needs fp8 (spec.model.quantization) or larger GPUs, "
                "or an LLMDeployment (which spans nodes) to send the requests to.",
                reason=r.MULTI_NODE_NOT_SUPPORTED,
            )
        parallelism(spec, planned)  # refuses more at once than there are shards
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
            self._preemptors.pop((namespace, name), None)

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
            waiting = self.spare.missing() if spec.priority == SPARE else None
            if waiting is not None:
                new = waiting_status(old, generation(body), planned.summary(), waiting)
                if self.write_status(body, new):
                    self.events.emit(body, "Warning", waiting.reason, waiting.message)
                self._poll(ns, name, new)  # the class may be created meanwhile
                return result
            rendered = render_batch_job(owner, spec, planned, self.fleet)
            job = self.applier.apply(rendered, result)
        pods = self.view.by_label("v1", "Pod", ns, BATCHJOB_LABEL, name)
        if job is not None and self._release_from_terminating_namespace(ns, job, pods, result):
            pods = []
        job_status = (job or {}).get("status") or {}
        completed = indexes(job_status.get("completedIndexes"))
        failed_for_good = indexes(job_status.get("failedIndexes"))
        previous = {s.index: s for s in old.shard_status}
        observed = observe_shards(shards, pods, completed, failed_for_good, self.scraper, previous)
        blocked = causes_of(self.blockers(pods, batch_references(spec, planned)), spec.priority)
        new = batch_status(
            old=old,
            generation=generation(body),
            planned=planned.summary(),
            shards=shards,
            job=job,
            observed=observed,
            blockers=blocked,
            preemptors=self._who_preempted((ns, name), observed, pods),
            pods=pods,
        )
        if result.created:
            self.events.emit(
                body, "Normal", r.CREATED_EVENT, f"Job {job_name(name)} with {shards} shard(s)"
            )
        wrote = self.write_status(body, new)
        if wrote:
            metrics_batch.count_status_write(ns, spec.priority, old, new)
        if wrote and blocked:
            self.announce_blockers(body, _message(old, r.RUNNING), blocked)
        if wrote and new.preemptions > old.preemptions and new.phase == "Preempted":
            self.events.emit(body, "Normal", r.PREEMPTED_EVENT, _message(new, r.PREEMPTED))
        if wrote and old.phase != new.phase:
            if new.phase == "Complete":
                self.events.emit(body, "Normal", r.COMPLETE_EVENT, _message(new, r.COMPLETE))
            elif new.phase == "Failed":
                self.events.emit(body, "Warning", r.FAILED_EVENT, _message(new, r.FAILED))
            elif old.phase == "Preempted" and new.phase == "Running":
                self.events.emit(body, "Normal", r.RESUMED_EVENT, _message(new, r.RUNNING))
        self._poll(ns, name, new)
        return result

    def _poll(self, ns: str, name: str, new: LLMBatchJobStatus) -> None:
        with self._guard:
            if new.phase in FINISHED:
                self._active.discard((ns, name))
            else:
                self._active.add((ns, name))

    def _who_preempted(
        self, key: tuple[str, str], observed: list[ShardObservation], pods: list[dict[str, Any]]
    ) -> dict[str, str | None]:
        """Who preempted each shard waiting after a preemption, from the scheduler's Event on the
        victim: read once per victim, and only while the shard waits."""
        now = datetime.now(UTC)
        present = {str(p["metadata"].get("uid")) for p in pods}
        with self._guard:
            known = {
                uid: who for uid, who in self._preemptors.get(key, {}).items() if uid in present
            }
        out: dict[str, str | None] = {}
        for victim in (o.preempted_by for o in observed if o.preempted_by is not None):
            at = parse_time(victim.at)
            recent = at is None or (now - at).total_seconds() < PREEMPTOR_EVENT_SECONDS
            if victim.uid not in known and recent:
                who = preemptor(self.events, key[0], victim.uid)
                if who is not None:
                    known[victim.uid] = who
            out[victim.uid] = known.get(victim.uid)
        with self._guard:
            self._preemptors[key] = known
        return out

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

    def start_polling(
        self, enqueue: Callable[[str, str], None], interval: float = POLL_SECONDS
    ) -> None:
        """Every `interval` seconds, `enqueue` each running job, whose reconcile re-reads its
        progress (a thread; `stop_polling`)."""
        self._poller = Resyncer("batch-poll", self.active, enqueue, interval)
        self._poller.start()

    def polling(self) -> bool:
        return self._poller is not None and self._poller.alive()

    def stop_polling(self, timeout: float = 0.0) -> bool:
        """Stop the poll and wait up to `timeout` seconds for it; whether it ended."""
        if self._poller is None:
            return True
        self._poller.stop()
        return self._poller.join(timeout)


def _message(status: LLMBatchJobStatus, ctype: str) -> str:
    found = find(status.conditions, ctype)
    return found.message if found is not None else ""
