"""`python -m localcluster.metricsstack.run --state-dir DIR`: the stack's own supervisor.

MetricsStack.start() writes DIR/metrics-stack/stack.json (the command lines) and starts this
process in a session of its own, with DIR/metrics-stack.pid. It runs Prometheus,
kube-state-metrics and prometheus-adapter as its children (same process group), restarts one that
exits, and on SIGTERM -- from MetricsStack.stop() or from Cluster.down(), which signals the group
of every pidfile in the state directory while the API server still runs -- first removes the
custom-metrics APIServices (an APIService whose backend is gone breaks discovery, and with it
namespace deletion and garbage collection, for every client of the cluster), then stops the
children. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

RESTART_BACKOFF_MAX = 30.0


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} metrics-stack: {msg}", flush=True)


class Child:
    def __init__(self, name: str, cmd: list[str], logdir: Path) -> None:
        self.name, self.cmd, self.logdir = name, cmd, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.backoff = 1.0
        self.next_start = 0.0
        self.started = 0.0

    def start(self) -> None:
        with open(self.logdir / f"{self.name}.log", "ab") as f:
            self.proc = subprocess.Popen(
                self.cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.started = time.monotonic()
        (self.logdir / f"{self.name}.pid").write_text(str(self.proc.pid))
        log(f"started {self.name} (pid {self.proc.pid})")

    def check(self) -> None:
        now = time.monotonic()
        if self.proc is None:
            if now >= self.next_start:
                self.start()
            return
        code = self.proc.poll()
        if code is None:
            if now - self.started > 60:
                self.backoff = 1.0
            return
        log(f"{self.name} exited with {code}; restarting in {self.backoff:.0f}s")
        self.proc = None
        self.next_start = now + self.backoff
        self.backoff = min(RESTART_BACKOFF_MAX, self.backoff * 2)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def wait(self, deadline: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        (self.logdir / f"{self.name}.pid").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="localcluster.metricsstack.run", description=__doc__)
    p.add_argument("--state-dir", type=Path, required=True)
    args = p.parse_args(argv)
    home = args.state_dir / "metrics-stack"
    spec = json.loads((home / "stack.json").read_text())
    children = [Child(n, cmd, home) for n, cmd in spec["processes"].items()]
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stopping:
        for c in children:
            c.check()
        time.sleep(0.5)
    log("stopping: removing the APIServices first")
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        subprocess.run(
            [
                *spec["kubectl"],
                "delete",
                "apiservice",
                *spec["apiservices"],
                "--ignore-not-found",
                "--wait=false",
                "--request-timeout=5s",
            ],
            timeout=8,
            check=False,
            capture_output=True,
        )
    for c in children:
        c.terminate()
    deadline = time.monotonic() + 8
    for c in children:
        c.wait(deadline)
    log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
