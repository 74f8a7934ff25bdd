"""The Operator dashboard's "Operator" row: the operator's own work, by kind (LLMDeployment,
LLMBatchJob): reconciles, their duration and errors, its writes to the API server, and its work
queues under client-go's workqueue_* names (operator/src/llmfleet/metrics_reconcile.py and
metrics_workqueue.py).

Only the leading replica reconciles; the standby's series stay at 0, so every query sums over
replicas.
"""

from __future__ import annotations

from . import promql as q
from .model import Panel, Query, Row

# The operator's queues; other controllers scraped into the same Prometheus use the same names.
QUEUES = '{name=~"llmdeployments|llmbatchjobs"}'


def _queue_quantile(histogram: str) -> tuple[Query, ...]:
    return tuple(
        Query(
            q.quantile(x, f"{histogram}_bucket{QUEUES}", by="name"),
            f"{{{{name}}}} p{p}",
        )
        for x, p in ((0.5, 50), (0.99, 99))
    )


OPERATOR_ROW = Row(
    "Operator",
    (
        Panel(
            "Reconciles/s by kind and result",
            "Reconciles per second of each kind (llmfleet_reconcile_total) by result: changed "
            "(wrote something), unchanged, invalid (spec cannot be planned), error.",
            (
                Query(
                    f"sum by (kind, result) (rate(llmfleet_reconcile_total[{q.RATE}]))",
                    "{{kind}} {{result}}",
                ),
            ),
            unit="ops",
            stacked=True,
        ),
        Panel(
            "Reconcile duration",
            "How long one reconcile of each kind takes (llmfleet_reconcile_duration_seconds).",
            tuple(
                Query(
                    q.quantile(x, "llmfleet_reconcile_duration_seconds_bucket", by="kind"),
                    f"{{{{kind}}}} p{p}",
                )
                for x, p in ((0.5, 50), (0.99, 99))
            ),
            unit="s",
        ),
        Panel(
            "Reconcile errors by reason",
            "Failed reconciles per second, by kind and reason (llmfleet_reconcile_errors_total: "
            "the Kubernetes API status such as Forbidden or Conflict, or the exception).",
            (
                Query(
                    f"sum by (kind, reason) (rate(llmfleet_reconcile_errors_total[{q.RATE}]))",
                    "{{kind}} {{reason}}",
                ),
            ),
            unit="ops",
            stacked=True,
        ),
        Panel(
            "Kubernetes API writes/s",
            "Writes the operator made, by verb and the kind written (llmfleet_api_writes_total; "
            "a status write is kind <Kind>/status). At rest it is 0: a steady stream of updates "
            "means something keeps reverting the objects.",
            (
                Query(
                    f"sum by (verb, kind) (rate(llmfleet_api_writes_total[{q.RATE}]))",
                    "{{verb}} {{kind}}",
                ),
            ),
            unit="ops",
        ),
        Panel(
            "Work queue depth",
            "Resources waiting for a worker in each queue (workqueue_depth), and how long the "
            "longest reconcile under way has run (workqueue_longest_running_processor_seconds): "
            "one that keeps growing is a stuck reconcile.",
            (
                Query(f"sum by (name) (workqueue_depth{QUEUES})", "{{name}} waiting"),
                Query(
                    f"max by (name) (workqueue_longest_running_processor_seconds{QUEUES})",
                    "{{name}} longest running (s)",
                ),
            ),
        ),
        Panel(
            "Work queue wait",
            "How long a resource waits in its queue before a worker takes it "
            "(workqueue_queue_duration_seconds).",
            _queue_quantile("workqueue_queue_duration_seconds"),
            unit="s",
        ),
        Panel(
            "Work queue work duration",
            "How long a worker takes over one resource, the reconcile included "
            "(workqueue_work_duration_seconds).",
            _queue_quantile("workqueue_work_duration_seconds"),
            unit="s",
        ),
        Panel(
            "Work queue adds and retries/s",
            "Resources queued per second (workqueue_adds_total) and of those, the retries of a "
            "failed reconcile after its backoff (workqueue_retries_total).",
            (
                Query(
                    f"sum by (name) (rate(workqueue_adds_total{QUEUES}[{q.RATE}]))",
                    "{{name}} adds",
                ),
                Query(
                    f"sum by (name) (rate(workqueue_retries_total{QUEUES}[{q.RATE}]))",
                    "{{name}} retries",
                ),
            ),
            unit="ops",
        ),
    ),
)
