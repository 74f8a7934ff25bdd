"""The Operator dashboard's row for LLMBatchJobs on spare GPUs (docs/batch.md, "Batch on spare
GPUs"): the GPU-hours spare jobs used, the shards online engines preempted, the lines run twice.

The operator's counters (llmfleet_batch_*_total, operator/src/llmfleet/metrics_batch.py) carry
only `namespace` and `priority`; only the leading replica counts, and a new leader starts from
zero, so every query takes increase() or rate() summed over replicas, which a restart does not
skew. Each query falls back to 0 where no batch job ran: an empty panel would read as broken.
"""

from __future__ import annotations

from . import promql as q
from .model import Panel, Query, Row

GPU_SECONDS = "llmfleet_batch_gpu_seconds_total"
PREEMPTIONS = "llmfleet_batch_preemptions_total"
LINES_REDONE = "llmfleet_batch_lines_redone_total"
SPARE = '{priority="Spare"}'


def _over_range(metric: str, scale: str = "") -> str:
    return f"(sum(increase({metric}{SPARE}[{q.RANGE}])) or vector(0)){scale}"


def _per_hour(metric: str) -> str:
    return f"sum(rate({metric}{SPARE}[{q.RATE}])) * 3600 or vector(0)"


def _spare_total(
    title: str,
    description: str,
    expr: str,
    legend: str,
    thresholds: tuple[tuple[float, str], ...] = (),
) -> Panel:
    """A stat panel of one instant total of Spare jobs over the time range."""
    query = (Query(expr, legend, instant=True),)
    return Panel(title, description, query, kind="stat", width=8, height=5, thresholds=thresholds)


BATCH_ROW = Row(
    "Batch on spare GPUs",
    (
        _spare_total(
            "Spare GPU-hours",
            "GPU-hours held by the shard pods of Spare LLMBatchJobs over the time range "
            '(llmfleet_batch_gpu_seconds_total{priority="Spare"}, each pod from its start to '
            "its end; status.gpuSeconds of each job): the work done on GPUs online serving "
            "left idle.",
            _over_range(GPU_SECONDS, " / 3600"),
            "GPU-hours",
        ),
        _spare_total(
            "Spare shards preempted",
            "Shard pods of Spare LLMBatchJobs the scheduler preempted for online engines over "
            "the time range (llmfleet_batch_preemptions_total; status.preemptions and the "
            "Preempted condition name the preempting pod). Each resumes from its output once a "
            "GPU frees: a cost in batch completion time, not in answers.",
            _over_range(PREEMPTIONS),
            "preempted",
        ),
        _spare_total(
            "Spare lines redone",
            "Lines of Spare LLMBatchJobs run a second time over the time range "
            "(llmfleet_batch_lines_redone_total; status.linesRedone): the shard stopped before "
            "writing them (a stop that outlasted terminationGracePeriodSeconds, or a crash). "
            "Goal 0: a graceful stop writes what it ran and hands the rest back. Each line is "
            "still in the output once; this is GPU time spent twice.",
            _over_range(LINES_REDONE),
            "redone",
            thresholds=((1, "orange"),),
        ),
        Panel(
            "GPUs held by batch shards",
            "GPUs the shard pods of LLMBatchJobs hold, by spec.priority (the rate of "
            "llmfleet_batch_gpu_seconds_total, which grows at each status write while shards "
            "run, so it moves in steps of the operator's poll). Spare falling while online "
            "engines scale up is preemption at work; 0 when no batch job runs.",
            (
                Query(
                    f"sum by (priority) (rate({GPU_SECONDS}[{q.RATE}])) or vector(0)",
                    "{{priority}}",
                ),
            ),
        ),
        Panel(
            "Spare preemptions and lines redone per hour",
            "Spare shard pods preempted and Spare lines run again, per hour "
            "(llmfleet_batch_preemptions_total, llmfleet_batch_lines_redone_total).",
            (
                Query(_per_hour(PREEMPTIONS), "shards preempted"),
                Query(_per_hour(LINES_REDONE), "lines redone"),
            ),
        ),
    ),
)
