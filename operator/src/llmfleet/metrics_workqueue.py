"""The work queues' metrics, under the names, types, labels and buckets client-go's workqueue
gives them (k8s.io/client-go/util/workqueue, as controller-runtime registers them), so the
dashboards and alerts written for Go controllers read the operator's queues as they are.

`name` is the queue's name: llmdeployments or llmbatchjobs. The two gauges of work under way are
computed when /metrics is read (client-go refreshes them every 500 ms instead).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

# client-go's prometheus.ExponentialBuckets(10e-9, 10, 12): 10 ns to 1000 s.
DURATION_BUCKETS = tuple(10.0**e for e in range(-8, 4))

DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
ADDS = Counter("workqueue_adds", "Total number of adds handled by workqueue", ["name"])
QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"],
    buckets=DURATION_BUCKETS,
)
WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name"],
    buckets=DURATION_BUCKETS,
)
UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
    "threads by observing the rate at which this increases.",
    ["name"],
)
LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running",
    ["name"],
)
RETRIES = Counter("workqueue_retries", "Total number of retries handled by workqueue", ["name"])


class QueueMetrics:
    """The series of one queue. The queue calls `added`, `started`, `finished` and `retried`,
    and gives the three functions read at scrape time; each is called under no lock of ours."""

    def __init__(
        self,
        name: str,
        depth: Callable[[], float],
        unfinished: Callable[[], float],
        longest: Callable[[], float],
    ) -> None:
        self._adds = ADDS.labels(name)
        self._retries = RETRIES.labels(name)
        self._queued = QUEUE_DURATION.labels(name)
        self._worked = WORK_DURATION.labels(name)
        DEPTH.labels(name).set_function(depth)
        UNFINISHED_WORK.labels(name).set_function(unfinished)
        LONGEST_RUNNING.labels(name).set_function(longest)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def started(self, waited: float) -> None:
        """A worker took a key that had been due for `waited` seconds."""
        self._queued.observe(max(0.0, waited))

    def finished(self, seconds: float) -> None:
        self._worked.observe(max(0.0, seconds))
