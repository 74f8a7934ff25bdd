"""The local cluster's processes: each started in a session (and process group) of its own, with
its pidfile `<name>.pid` and its log `<name>.log` in the cluster's state directory, and stopped
group and all. The control plane and the instruments start ahead of the workloads."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .tools import HERE

# The local cluster puts on one machine what runs on separate ones: control-plane and
# metrics-stack machines that the engines' load cannot take CPU from. Here loaded engines, a
# router and clients on 2 cores starved the apiserver and the HPA loop (one HPA evaluation per
# ~40 s instead of per 5 s, handler timeouts), so these processes run ahead of the workloads.
CONTROL_PLANE_NICE = -10


def ahead_of_workloads(cmd: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start `cmd` in a session of its own, ahead of the workloads: at CONTROL_PLANE_NICE
    (coreutils `nice` sets it before exec, so every thread and child has it) and with its
    session's scheduling group at the same nice.

    The group matters more than the process: with the kernel's autogroup scheduling
    (`kernel.sched_autogroup_enabled=1`, the default on this machine and on most desktop and
    VM kernels) the CPU is shared between sessions first, and a process's own nice only orders
    it within its session. A nice -10 process in a session of its own then got no more CPU than
    the node runner's session of busy engines at nice 10: a sampler at nice -10 went 5 s without
    running while the engines' model processes took 80 % of both cores."""
    # `nice -n` adds to the caller's own nice: from a caller that runs niced itself (a test run
    # under `nice`), the adjustment that lands on CONTROL_PLANE_NICE.
    adjustment = CONTROL_PLANE_NICE - os.getpriority(os.PRIO_PROCESS, 0)
    proc = subprocess.Popen(["nice", "-n", str(adjustment), *cmd], start_new_session=True, **popen)
    # Popen returns after the child's setsid and exec, so this is the new session's group.
    # No file without autogroup support; EPERM without CAP_SYS_NICE (then, like `nice`, it
    # runs as it is).
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/autogroup").write_text(str(CONTROL_PLANE_NICE))
    return proc


@dataclass(frozen=True)
class Processes:
    """The processes whose pidfiles are in `state_dir`, each known by its name."""

    state_dir: Path

    def pidfile(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def log(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def names(self) -> list[str]:
        """Every name with a pidfile: whatever was started on this state directory."""
        return sorted(p.stem for p in self.state_dir.glob("*.pid"))

    def pid(self, name: str) -> int | None:
        try:
            return int(self.pidfile(name).read_text())
        except (OSError, ValueError):
            return None

    def alive(self, name: str) -> bool:
        """Whether the process started under `name` runs (and is ours, not a reused pid)."""
        pid = self.pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A reused pid would not carry our state directory on its command line.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.state_dir).encode() in cmdline or name.encode() in cmdline

    def check(self, name: str) -> None:
        """RuntimeError naming the log if the process started under `name` has exited. (Not
        `alive`: right after the fork the child's command line is still its parent's.)"""
        pid = self.pid(name)
        if pid is None or not pid_exists(pid):
            raise RuntimeError(f"{name} exited; see {self.log(name)}")

    def start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        """Start `cmd` under `name` ahead of the workloads, with `env` added to ours, unless it
        runs already."""
        if self.alive(name):
            return
        logf = open(self.log(name), "ab")  # noqa: SIM115 - handed to the child
        proc = ahead_of_workloads(
            cmd,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.state_dir,
            env={**os.environ, **(env or {})},
        )
        logf.close()
        self.pidfile(name).write_text(str(proc.pid))

    def start_dev(self, name: str, module: str, *args: str) -> None:
        """Run `python -m <module> --state-dir=<state dir> <args>` (a module of dev/) under
        `name` among the workloads (no control-plane priority), in a session of its own."""
        cmd = [sys.executable, "-m", module, f"--state-dir={self.state_dir}", *args]
        with open(self.log(name), "ab") as logf:
            proc = subprocess.Popen(
                cmd,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.state_dir,
                env={**os.environ, "PYTHONPATH": with_dev_pythonpath(os.environ.get("PYTHONPATH"))},
            )
        self.pidfile(name).write_text(str(proc.pid))

    def stop(self, name: str, grace: float = 10.0) -> None:
        """SIGTERM the process group started under `name`, SIGKILL what is left after `grace`,
        and return only when no process of the group lives: the leader may exit before the
        children it was stopping (the node runner before its vLLM engines)."""
        pid = self.pid(name)
        if pid is not None and self.alive(name):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and group_alive(pid):
                time.sleep(0.1)
            if group_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                while group_alive(pid):
                    time.sleep(0.05)
        self.pidfile(name).unlink(missing_ok=True)


def group_alive(pgid: int) -> bool:
    """Whether a process of process group `pgid` lives (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own unreaped child) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def with_dev_pythonpath(pythonpath: str | None) -> str:
    """dev/ ahead of the caller's PYTHONPATH: dev/gpulab adds the packages it carries."""
    return os.pathsep.join(filter(None, (str(HERE.parent), pythonpath)))
