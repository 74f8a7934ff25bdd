"""The node runner's one scheduling adaptation (docs/cpu-adaptations.md, item 15): the processes a
vLLM server pod starts for its model run below its API server, every thread of them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster.noderunner import procs

# A parent (the "API server") that starts a child (the "engine core"); the child starts a thread
# after a moment, as vLLM's OpenMP threads start after their process.
# With "wiped", the child runs without the marker in its environment, as vLLM's engine core and
# workers do once setproctitle has overwritten their environment block.
PARENT = """
import os, subprocess, sys, time
env = {"PATH": os.environ.get("PATH", "")} if sys.argv[2] == "wiped" else None
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env)
print(child.pid, flush=True)
time.sleep(60)
"""
CHILD = """
import threading, time
time.sleep(0.5)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(60)
"""


def nice_of_threads(pid: int) -> set[int]:
    return {
        os.getpriority(os.PRIO_PROCESS, int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()
    }


@pytest.fixture(params=["inherited", "wiped"], ids=["marker-inherited", "marker-wiped"])
def pod(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, int]]:
    marker = f"test-runner/{uuid.uuid4().hex}/vllm"
    env = {**os.environ, procs.MARKER_ENV: marker}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, request.param],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while len(list(Path(f"/proc/{child}/task").iterdir())) < 2:
            assert time.monotonic() < deadline, "the child never started its thread"
            time.sleep(0.05)
        yield marker, parent.pid, child
    finally:
        procs.kill_all(marker)
        parent.wait(5)


def test_the_models_processes_get_the_nice_value_on_every_thread_the_api_server_keeps_its_own(
    pod: tuple[str, int, int],
) -> None:
    marker, server, model = pod
    before = os.getpriority(os.PRIO_PROCESS, server)
    changed = procs.lower_priority(marker, spare=server, nice=10)
    assert changed == 2  # the child's main thread and the thread it started
    assert nice_of_threads(model) == {10}
    assert nice_of_threads(server) == {before}


def test_lowering_again_changes_nothing_and_never_raises_a_priority(
    pod: tuple[str, int, int],
) -> None:
    marker, server, model = pod
    procs.lower_priority(marker, spare=server, nice=10)
    assert procs.lower_priority(marker, spare=server, nice=10) == 0
    assert procs.lower_priority(marker, spare=server, nice=5) == 0
    assert nice_of_threads(model) == {10}


def test_processes_of_another_pod_are_left_alone(pod: tuple[str, int, int]) -> None:
    _, server, model = pod
    assert procs.lower_priority(f"test-runner/{uuid.uuid4().hex}", spare=0, nice=10) == 0
    assert nice_of_threads(model) == {os.getpriority(os.PRIO_PROCESS, server)}


def test_stopping_the_container_kills_every_process_it_started(pod: tuple[str, int, int]) -> None:
    marker, server, model = pod
    assert {server, model} <= set(procs.find(marker))
    procs.kill_all(marker)
    assert not procs.alive(server)
    assert not procs.alive(model)
