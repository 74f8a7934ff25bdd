"""Stopping a pod's containers as a kubelet does: preStop hooks and SIGTERM within the grace
period, then SIGKILL for everything the container left."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from . import procs
from .container import Container, timestamp
from .podstatus import StatusWriter
from .probes import check

# pods.py's logger: a pod's log lines keep the name they had before its worker was split.
log = logging.getLogger("noderunner.pods")


class ContainerStops(StatusWriter):
    """The part of PodWorker (pods.py) that stops its containers, for a probe's restart, the
    pod's deletion or the runner's shutdown."""

    def _grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        value = meta.get("deletionGracePeriodSeconds")
        if value is None:
            value = spec.get("terminationGracePeriodSeconds", 30)
        return float(value)

    def _stop_container(self, c: Container, grace: float) -> int:
        """SIGTERM the main process, SIGKILL everything of the container after `grace`."""
        proc = c.proc
        if proc is None:
            return 0
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline and not self._abandon():
            time.sleep(0.1)
        procs.kill_all(procs.marker(self.hooks.runner_id, self.uid, c.name))
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        return proc.returncode if proc.returncode is not None else 137

    def _abandon(self) -> bool:
        """Stop waiting for a graceful end: the pod object is gone, or the runner stops."""
        return self.gone.is_set() or self.shutdown.is_set()

    def _pre_stop(self, c: Container, deadline: float) -> None:
        hook = (c.spec.get("lifecycle") or {}).get("preStop") or {}
        if "sleep" in hook:
            until = min(deadline, time.monotonic() + float(hook["sleep"]["seconds"]))
            while time.monotonic() < until and not self._abandon():
                time.sleep(0.1)
        elif "exec" in hook:
            env = self._last_env.get(c.name, dict(self.hooks.base_env))
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    hook["exec"]["command"],
                    env=env,
                    capture_output=True,
                    timeout=max(0.1, deadline - time.monotonic()),
                    check=False,
                )
        elif "httpGet" in hook:
            check(
                {"httpGet": hook["httpGet"], "timeoutSeconds": max(1, deadline - time.monotonic())},
                self.ip,
                c.spec.get("ports") or [],
                {},
            )

    def _graceful_delete(self) -> None:
        grace = self._grace()
        log.info("%s/%s: deleting (grace %.0fs)", self.ns, self.pod_name, grace)
        for c in self.containers:
            c.ready = False
        self._publish(force_not_ready=True)
        self._terminate(grace, write=True)
        with contextlib.suppress(Exception):
            self.hooks.delete_pod(self.ns, self.pod_name, self.uid)

    def _terminate(self, grace: float, write: bool) -> None:
        deadline = time.monotonic() + grace
        running = [c for c in self.containers if c.running()]
        if write:  # preStop hooks run in parallel, within the grace period
            _in_parallel(self._pre_stop, running, deadline, until=deadline)
        remaining = max(2.0, deadline - time.monotonic())  # the kubelet's minimum after preStop
        _in_parallel(self._stop_and_record, running, remaining, until=None)
        self._kill_everything()
        if write:
            self._publish()

    def _stop_and_record(self, c: Container, grace: float) -> None:
        code = self._stop_container(c, grace)
        c.finished = True
        c.proc = None
        c.waiting_reason = ""
        exit_code = code if code >= 0 else 128 - code
        message = self._termination_message(c, exit_code)
        c.last_terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": timestamp(c.started_at),
            "finishedAt": timestamp(),
            **({"message": message} if message else {}),
        }

    def _kill_everything(self) -> None:
        for c in self.containers:
            if c.proc is not None and c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.kill()
        procs.kill_all(procs.marker(self.hooks.runner_id, self.uid))
        for c in self.containers:
            if c.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=5)


def _in_parallel(
    each: Callable[[Container, float], None],
    containers: list[Container],
    arg: float,
    until: float | None,
) -> None:
    """`each(c, arg)` for every container, each in a thread of its own; waits for them all, or
    until the monotonic time `until`."""
    threads = [threading.Thread(target=each, args=(c, arg), daemon=True) for c in containers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(None if until is None else max(0.0, until - time.monotonic()))
