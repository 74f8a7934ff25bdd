"""A real vLLM engine frozen mid-decode on the node runner, for the stall detection's test
(tests/e2e/test_engine_failures.py) and its figure (bench/stall.py): the engine core stopped
with SIGSTOP while requests run, so vLLM's API server and /health keep answering and only the
operator's judgement (spec.engine.stallDetection) can take the engine out of rotation."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from localcluster.noderunner import procs
from localcluster.promtext import scrape


def engine_core(runner: str, uid: str) -> int:
    """The pid of the pod's vLLM engine core: a descendant of the pod's processes whose title is
    VLLM::EngineCore. Not found by the node runner's marker itself: setproctitle overwrites the
    process's original environment block, so /proc/PID/environ no longer carries it."""
    pod = set(procs.find(procs.marker(runner, uid)))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if b"EngineCore" in (entry / "cmdline").read_bytes() and pod & _ancestors(entry.name):
                return int(entry.name)
    raise AssertionError(f"no EngineCore process under pod {uid}'s ({sorted(pod)})")


def _ancestors(pid: str) -> set[int]:
    out: set[int] = set()
    while pid not in ("0", "1"):
        status = Path(f"/proc/{pid}/status").read_text()
        pid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        out.add(int(pid))
    return out


def running(ip: str) -> float:
    """vLLM's requests-running gauge of the engine at `ip` (its server keeps the last value the
    engine core reported)."""
    page = scrape(f"http://{ip}:8000/metrics")
    return sum(v for k, v in page.items() if k.startswith("vllm:num_requests_running{"))


def keep_decoding(ip: str, stop: threading.Event, model: str = "tiny") -> None:
    """Long requests back to back, two at a time, until `stop`: whenever the engine core is
    frozen, a request is running. The ones it froze never come back."""
    body = {"model": model, "prompt": "Once", "max_tokens": 480, "ignore_eos": True}

    def one() -> None:
        request = urllib.request.Request(
            f"http://{ip}:8000/v1/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with contextlib.suppress(OSError):
            urllib.request.urlopen(request, timeout=120).read()

    def loop() -> None:
        while not stop.is_set():
            one()

    for _ in range(2):
        threading.Thread(target=loop, daemon=True).start()


@contextlib.contextmanager
def frozen(runner: str, uid: str) -> Iterator[int]:
    """SIGSTOP the pod's engine core; SIGCONT it on the way out (if it still exists), so the node
    runner's stop of the pod is not held by a stopped process."""
    pid = engine_core(runner, uid)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
