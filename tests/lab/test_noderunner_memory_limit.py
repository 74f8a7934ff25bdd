"""The node runner kills a process container that holds more than its memory limit, as a node's
cgroup does, and reports it as the kubelet does: terminated OOMKilled, exit code 137, then the
crash-loop back-off (dev/localcluster/noderunner/memlimit.py). Real processes on this machine."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localcluster import imagepull
from localcluster.noderunner import memlimit
from localcluster.noderunner.container import container_status
from localcluster.noderunner.pods import PodWorker
from podworkers import pod_worker

MIB = 1 << 20
# Writes `held` MiB (so they are resident), says so, then sleeps.
HOLD = "import sys, time; b = b'x' * ({held} << 20); print('holding', flush=True); time.sleep(60)"

LIMITS = {
    "mebibytes": ("512Mi", 512 * MIB),
    "gigabytes": ("1G", 10**9),
    "fractional-gibibytes": ("1.5Gi", 3 * 512 * MIB),
    "plain-bytes": ("1048576", MIB),
}


@pytest.mark.parametrize(("said", "expected"), LIMITS.values(), ids=LIMITS)
def test_a_memory_limit_is_read_as_kubernetes_reads_the_quantity(said: str, expected: int) -> None:
    assert memlimit.limit_bytes({"resources": {"limits": {"memory": said}}}) == expected


def test_a_container_without_a_memory_limit_has_none() -> None:
    assert memlimit.limit_bytes({"resources": {"requests": {"memory": "1Gi"}}}) is None


def test_what_a_process_holds_counts_what_it_wrote() -> None:
    before = memlimit.charged_bytes([os.getpid()])
    block = b"x" * (64 * MIB)
    assert memlimit.charged_bytes([os.getpid()]) - before >= 60 * MIB
    del block


@pytest.fixture
def worker_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(imagepull, "held_images", lambda: frozenset({"docker.io/library/x:1"}))
    workers: list[PodWorker] = []

    def make(held_mib: int, limit: str) -> PodWorker:
        container = {
            "name": "engine",
            "image": "x:1",
            "command": ["python3", "-c", HOLD.format(held=held_mib)],
            "resources": {"limits": {"memory": limit}},
        }
        pod = {
            "metadata": {"name": f"p{len(workers)}", "namespace": "ns", "uid": f"u{len(workers)}"},
            "spec": {"containers": [container]},
        }
        worker = pod_worker(pod, tmp_path, real_processes=True)
        workers.append(worker)
        return worker

    yield make
    for w in workers:
        w._kill_everything()


def holding(worker: PodWorker) -> bool:
    return "holding" in worker.log_path.read_text() if worker.log_path.exists() else False


CASES = {
    "over-its-limit": (256, "96Mi", "OOMKilled"),
    "within-its-limit": (32, "1Gi", None),
}


@pytest.mark.parametrize(("held", "limit", "ended"), CASES.values(), ids=CASES)
def test_a_container_over_its_memory_limit_is_oom_killed_and_restarted_with_back_off(
    worker_of: Any, held: int, limit: str, ended: str | None
) -> None:
    worker = worker_of(held, limit)
    (c,) = worker.containers
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not holding(worker):
        worker._tick(c)
        time.sleep(0.2)
    assert holding(worker), worker.log_path.read_text()
    # Checks once it holds it all (memlimit.CHECK_SECONDS apart): four for one within its limit;
    # for one over it, until the runner has reaped it (a SIGKILLed process takes its time to exit
    # on a loaded machine: four ticks back to back once came before the exit).
    deadline = time.monotonic() + 10
    checks = 0
    while True:
        c.next_memory_check = 0.0
        worker._tick(c)
        checks += 1
        done = c.proc is None if ended is not None else checks >= 4
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    status = container_status(c)
    if ended is None:
        assert "running" in status["state"]
        assert c.restart_count == 0
        return
    assert c.proc is None
    last = status["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == (ended, 137)
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert c.restart_count == 1
