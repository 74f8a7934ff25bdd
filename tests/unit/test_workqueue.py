"""The queue child events feed (llmfleet.reconcile.machinery.workqueue): folding, one reconcile at a
time per resource, and a backoff per resource that keeps a failing one from holding up the
others."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import REGISTRY

from llmfleet.reconcile.machinery.workqueue import Backoff, WorkQueue

A, B = ("ns", "a"), ("ns", "b")


def wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        (1, 0.5, 1.0),
        (2, 1.0, 2.0),
        (4, 4.0, 8.0),
        (20, 150.0, 300.0),  # capped
    ],
    ids=["first-failure", "second-doubles", "fourth", "capped"],
)
def test_backoff_doubles_per_failure_with_jitter_up_to_a_cap(
    failures: int, low: float, high: float
) -> None:
    backoff = Backoff(first=1.0, cap=300.0)
    for _ in range(failures):
        delay = backoff.failed(A)
    assert low <= delay <= high
    assert backoff.delay(A) == delay
    assert backoff.failures(A) == failures
    assert backoff.failures(B) == 0  # per resource


def test_backoff_honours_retry_after_and_forgets_on_success() -> None:
    backoff = Backoff(first=1.0)
    assert backoff.failed(A, retry_after=30.0) == 30.0
    assert backoff.waiting(A)
    assert not backoff.waiting(B)
    backoff.succeeded(A)
    assert (backoff.failures(A), backoff.delay(A), len(backoff)) == (0, 0.0, 0)
    assert not backoff.waiting(A)


def test_a_key_asked_for_many_times_while_waiting_runs_once() -> None:
    runs: list[tuple[str, str]] = []
    queue = WorkQueue("t", lambda ns, n: runs.append((ns, n)), workers=2)
    for _ in range(50):
        queue.add(A, delay=0.2)
    queue.add(A, delay=0.05)  # sooner wins
    queue.start()
    wait_for(lambda: runs)
    time.sleep(0.3)
    queue.stop()
    assert runs == [A]


def test_a_key_asked_for_while_running_runs_again_after_never_alongside() -> None:
    running, overlaps, runs = threading.Semaphore(1), [], []
    release = threading.Event()

    def work(ns: str, name: str) -> None:
        if not running.acquire(blocking=False):
            overlaps.append(name)
            return
        runs.append(name)
        if len(runs) == 1:
            release.wait(5)
        running.release()

    queue = WorkQueue("t-again", work, workers=4)
    queue.start()
    queue.add(A)
    wait_for(lambda: runs)
    for _ in range(10):
        queue.add(A)  # arrives while the first run holds the key
    release.set()
    wait_for(lambda: len(runs) == 2)
    time.sleep(0.1)
    queue.stop()
    assert (runs, overlaps) == (["a", "a"], [])
    assert sample("workqueue_adds_total", "t-again") == 2  # the first, and the ten as one


def test_a_failing_key_comes_back_after_its_delay_and_does_not_hold_up_others() -> None:
    seen: list[tuple[str, float]] = []
    start = time.monotonic()

    def work(ns: str, name: str) -> float | None:
        seen.append((name, time.monotonic() - start))
        return 0.3 if name == "a" and len(seen) < 3 else None

    queue = WorkQueue("t", work, workers=1)
    queue.start()
    queue.add(A)
    queue.add(B)
    wait_for(lambda: [n for n, _ in seen].count("a") == 2)
    queue.stop()
    names = [n for n, _ in seen]
    assert names[:2] == ["a", "b"]  # b ran while a waited out its delay
    retried = [t for n, t in seen if n == "a"][1]
    assert retried >= 0.3


# --- client-go's workqueue metrics ---------------------------------------------------------------


def sample(metric: str, queue: str) -> float:
    return REGISTRY.get_sample_value(metric, {"name": queue}) or 0.0


@pytest.mark.parametrize(
    ("adds", "expected"),
    [
        ([(A, 0.0)], 1),
        ([(A, 0.0), (A, 0.0), (A, 0.5)], 1),  # folded into the waiting one
        ([(A, 0.5), (A, 0.0)], 1),  # sooner, still one key waiting
        ([(A, 0.0), (B, 0.0)], 2),
    ],
    ids=["one", "asked-again-while-waiting", "brought-forward", "two-keys"],
)
def test_adds_count_keys_that_were_not_already_waiting(
    request: pytest.FixtureRequest,
    adds: list[tuple[tuple[str, str], float]],
    expected: int,
) -> None:
    name = request.node.name
    queue = WorkQueue(name, lambda _ns, _n: None)
    for key, delay in adds:
        queue.add(key, delay)
    assert sample("workqueue_adds_total", name) == expected


def test_depth_counts_keys_due_and_not_those_waiting_out_a_delay() -> None:
    queue = WorkQueue("depth", lambda _ns, _n: None, workers=1)
    queue.add(A)
    queue.add(B)
    queue.add(("ns", "later"), delay=60.0)
    assert sample("workqueue_depth", "depth") == 2
    queue.start()
    wait_for(lambda: sample("workqueue_depth", "depth") == 0)
    assert len(queue) == 1  # the delayed key still waits, outside the depth
    queue.stop()


def test_a_run_observes_its_wait_and_its_work_and_a_retry_is_counted() -> None:
    runs: list[str] = []

    def work(_ns: str, name: str) -> float | None:
        runs.append(name)
        time.sleep(0.05)
        return 0.01 if len(runs) == 1 else None  # the first run fails once

    queue = WorkQueue("runs", work, workers=1)
    queue.add(A)
    time.sleep(0.05)  # waits in the queue before any worker starts
    queue.start()
    wait_for(lambda: sample("workqueue_work_duration_seconds_count", "runs") == 2)
    queue.stop()
    assert runs == ["a", "a"]
    assert sample("workqueue_retries_total", "runs") == 1
    assert sample("workqueue_adds_total", "runs") == 2  # the first add and the retry's
    assert sample("workqueue_queue_duration_seconds_count", "runs") == 2
    assert sample("workqueue_queue_duration_seconds_sum", "runs") >= 0.05
    assert sample("workqueue_work_duration_seconds_sum", "runs") >= 0.1


def test_work_under_way_shows_in_unfinished_and_longest_running_until_it_ends() -> None:
    release, started = threading.Event(), threading.Event()

    def work(_ns: str, _name: str) -> None:
        started.set()
        release.wait(5)

    queue = WorkQueue("stuck", work, workers=2)
    queue.start()
    queue.add(A)
    queue.add(B)
    started.wait(5)
    time.sleep(0.1)
    longest = sample("workqueue_longest_running_processor_seconds", "stuck")
    assert longest >= 0.1
    assert sample("workqueue_unfinished_work_seconds", "stuck") >= longest
    release.set()
    wait_for(lambda: sample("workqueue_work_duration_seconds_count", "stuck") == 2)
    assert sample("workqueue_longest_running_processor_seconds", "stuck") == 0
    assert sample("workqueue_unfinished_work_seconds", "stuck") == 0
    queue.stop()
