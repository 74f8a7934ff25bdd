"""The operator's metrics of LLMBatchJobs: preemptions, lines redone and GPU-seconds, labelled by
namespace and spec.priority only (bounded however many jobs run).

Each counter grows by what an LLMBatchJob's status gained in a status write, so a preemption is
counted once however often the job is reconciled, and once across operator restarts and leader
failovers: the status, not this process, remembers what was counted.
"""

from __future__ import annotations

from prometheus_client import Counter

from llmfleet.models.batchjob_status import LLMBatchJobStatus

BATCH_PREEMPTIONS = Counter(
    "llmfleet_batch_preemptions",
    "Shard pods of LLMBatchJobs that the scheduler preempted (status.preemptions)",
    ["namespace", "priority"],
)
BATCH_LINES_REDONE = Counter(
    "llmfleet_batch_lines_redone",
    "Lines of LLMBatchJobs run again after the pod running them stopped before writing them "
    "(status.linesRedone)",
    ["namespace", "priority"],
)
BATCH_GPU_SECONDS = Counter(
    "llmfleet_batch_gpu_seconds",
    "GPU-seconds held by LLMBatchJob shard pods, from each pod's start to its end "
    "(status.gpuSeconds); priority=Spare is the work done on spare GPUs",
    ["namespace", "priority"],
)


def count_status_write(
    namespace: str, priority: str, old: LLMBatchJobStatus, new: LLMBatchJobStatus
) -> None:
    """Add what `new` gained over `old` (the status it replaced in the API server).

    Called by `BatchJobController` after each status write of an LLMBatchJob. Every series of
    the job's namespace and priority exists from its first write on, at 0 until something is
    added: PromQL's increase() counts nothing for a series' first sample, so one that appeared
    at its first preemption would hide that preemption from the dashboard's row."""
    for counter, before, after in (
        (BATCH_PREEMPTIONS, old.preemptions, new.preemptions),
        (BATCH_LINES_REDONE, old.lines_redone, new.lines_redone),
        (BATCH_GPU_SECONDS, old.gpu_seconds, new.gpu_seconds),
    ):
        child = counter.labels(namespace, priority)
        if after > before:
            child.inc(after - before)
