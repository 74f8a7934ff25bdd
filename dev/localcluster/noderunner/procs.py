"""Processes of pods: found by a marker in their environment and by descent, so no child escapes.

Every process a container starts (vLLM's API server, its engine core, its workers) inherits
MARKER_ENV=<runner id>/<pod uid>/<container>; the runner finds them all through /proc and kills
them when the container stops, when the runner stops, and on startup (leftovers of a runner that
was killed). The environment alone is not enough: vLLM renames its engine core and workers with
setproctitle, which overwrites the environment block /proc/PID/environ reads (checked with the
pinned vLLM's Python), so the descendants of a marked process count as marked too, as a
container's cgroup holds them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from pathlib import Path

MARKER_ENV = "LLMFLEET_NODE_RUNNER_POD"


def runner_id(node: str, state_dir: Path) -> str:
    """Names one runner (node + cluster state directory): two clusters' runners never touch each
    other's processes, even with the same node name."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return f"{node}.{digest}"


def marker(runner: str, uid: str = "", container: str = "") -> str:
    return "/".join(p for p in (runner, uid, container) if p)


def find(prefix: str) -> list[int]:
    """Pids whose environment carries a marker starting with `prefix`, and their descendants."""
    needle = f"{MARKER_ENV}={prefix}".encode()
    me = os.getpid()
    marked: set[int] = set()
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        try:
            env = (entry / "environ").read_bytes()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
        for var in env.split(b"\0"):
            if var.startswith(needle) and var[len(needle) : len(needle) + 1] in (b"", b"/"):
                marked.add(pid)
                break
    found, todo = set(marked), list(marked)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child != me:
                found.add(child)
                todo.append(child)
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def kill_all(prefix: str, timeout: float = 5.0) -> None:
    """SIGKILL every process marked with `prefix` and wait until they are gone."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in find(prefix) if alive(p)]
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def lower_priority(prefix: str, spare: int, nice: int) -> int:
    """Give every thread of the processes marked with `prefix`, but those of pid `spare`, at least
    `nice`; returns how many threads it changed. Threads, not processes: Linux keeps a nice value
    per thread, and vLLM's OpenMP threads may start after their process was seen."""
    changed = 0
    for pid in find(prefix):
        if pid == spare:
            continue
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                tid = int(task.name)
                with contextlib.suppress(OSError):
                    if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                        os.setpriority(os.PRIO_PROCESS, tid, nice)
                        changed += 1
    return changed
