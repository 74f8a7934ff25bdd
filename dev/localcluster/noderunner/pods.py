"""One pod on the local node: its containers as processes, probed, restarted and stopped like a
kubelet does it, with the pod's status written back through pods/status.

PodWorker is the pod's thread, with its loop and probes; its other parts are how it starts
containers (podstart.py), stops them (podstop.py) and writes the status (podstatus.py), over the
state they share (podstate.py)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .. import imagepull
from . import memlimit, procs, volumes
from .container import BACKOFF_START, Conditions, Container, timestamp
from .podstart import ContainerStarts
from .podstate import Hooks
from .podstop import ContainerStops
from .probes import check

log = logging.getLogger("noderunner.pods")

BACKOFF_RESET_AFTER = 600.0  # running this long forgives earlier crashes
TICK = 0.5
# The model's processes of a vLLM server pod (engine core, workers) run below its API server:
# on a GPU node the model runs on the GPU and the API server has the host's CPUs; here the model
# runs on the same 2 cores, and at equal priority it starved the API server, which then delivered
# finished responses seconds late, in bursts (docs/cpu-adaptations.md, "priority").
MODEL_NICE = 10
RENICE_EVERY = 2.0


class PodWorker(ContainerStarts, ContainerStops, threading.Thread):
    def __init__(self, pod: dict[str, Any], ip: str, hooks: Hooks) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.pod = pod
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.ip = ip
        self.hooks = hooks
        self.delete_requested = threading.Event()  # deletionTimestamp set: graceful stop
        self.gone = threading.Event()  # the pod object is gone: stop at once
        self.shutdown = threading.Event()  # the runner stops: stop processes, write nothing
        self.wake = threading.Event()
        self.containers = [Container(c) for c in pod["spec"]["containers"]]
        self.start_time = pod.get("status", {}).get("startTime") or timestamp()
        self.conditions = Conditions()
        self._said: set[str] = set()  # the refusals already posted as Events
        self.pulls = imagepull.Puller()
        self.last_status: dict[str, Any] | None = None
        self.terminal = False
        self._adopt(pod.get("status") or {})
        log_dir = hooks.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{self.ns}_{self.pod_name}.log"

    # --- entry points from the runner -------------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.delete_requested.set()
            self.wake.set()

    def mark_gone(self) -> None:
        self.gone.set()
        self.wake.set()

    def stop_for_shutdown(self) -> None:
        self.shutdown.set()
        self.wake.set()

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._loop()
        except Exception:
            log.exception("pod %s/%s: worker failed", self.ns, self.pod_name)
            self._kill_everything()
        finally:
            if not self.shutdown.is_set():
                volumes.cleanup(self.hooks.state_dir, self.uid)
            if self.hooks.gpus is not None:
                self.hooks.gpus.release(self.uid)

    def _loop(self) -> None:
        while True:
            if self.shutdown.is_set():
                self._terminate(grace=5.0, write=False)
                return
            if self.gone.is_set():
                self._kill_everything()
                return
            if self.delete_requested.is_set():
                self._graceful_delete()
                return
            for c in self.containers:
                self._tick(c)
            self._publish()
            if all(c.finished for c in self.containers):
                self.terminal = True
                return
            self.wake.wait(TICK)
            self.wake.clear()

    def _tick(self, c: Container) -> None:
        now = time.monotonic()
        if c.finished:
            return
        if c.proc is None:
            if now >= c.next_start:
                self._start(c)
            return
        code = c.proc.poll()
        if code is not None:
            self._on_exit(c, code, reason="Completed" if code == 0 else "Error")
            return
        if now - c.started_mono > BACKOFF_RESET_AFTER:
            c.backoff = BACKOFF_START
        if c.memory_limit is not None and now >= c.next_memory_check:
            c.next_memory_check = now + memlimit.CHECK_SECONDS
            if self._over_limit(c):
                return
        if c.vllm_server and now >= c.next_renice:
            marker = procs.marker(self.hooks.runner_id, self.uid, c.name)
            procs.lower_priority(marker, spare=c.proc.pid, nice=MODEL_NICE)
            c.next_renice = now + RENICE_EVERY
        self._probe(c, now)

    def _over_limit(self, c: Container) -> bool:
        """Kill the container, as the kernel's OOM killer kills a cgroup's processes, once they
        hold more than its memory limit; whether it did."""
        marker = procs.marker(self.hooks.runner_id, self.uid, c.name)
        held = memlimit.charged_bytes(procs.find(marker))
        if c.proc is None or c.memory_limit is None or held <= c.memory_limit:
            return False
        log.info(
            "%s/%s %s: %d bytes over its memory limit of %d: OOMKilled",
            self.ns,
            self.pod_name,
            c.name,
            held - c.memory_limit,
            c.memory_limit,
        )
        procs.kill_all(marker)
        c.proc.wait(timeout=5)
        self._on_exit(c, memlimit.OOM_EXIT_CODE, reason=memlimit.OOM_REASON)
        return True

    def _probe(self, c: Container, now: float) -> None:
        ports = c.spec.get("ports") or []
        env = self._last_env.get(c.name, {})
        startup = c.probes.get("startupProbe")
        if not c.started:
            if startup is None:
                c.started = True
            elif startup.due(now):
                ok, msg = check(startup.spec, self.ip, ports, env)
                startup.record(ok, now)
                if ok:
                    c.started = True
                    log.info("%s/%s %s: startup probe passed", self.ns, self.pod_name, c.name)
                elif startup.failures >= startup.failure_threshold:
                    self._restart(c, f"startup probe failed: {msg}")
                    return
            if not c.started:
                return
        ready = c.probes.get("readinessProbe")
        if ready is None:
            c.ready = True
        elif ready.due(now):
            ok, msg = check(ready.spec, self.ip, ports, env)
            ready.record(ok, now)
            if ok and ready.successes >= ready.success_threshold:
                c.ready = True
            elif not ok and ready.failures >= ready.failure_threshold:
                if c.ready:
                    log.info("%s/%s %s: not ready: %s", self.ns, self.pod_name, c.name, msg)
                c.ready = False
        live = c.probes.get("livenessProbe")
        if live is not None and live.due(now):
            ok, msg = check(live.spec, self.ip, ports, env)
            live.record(ok, now)
            if not ok and live.failures >= live.failure_threshold:
                self._restart(c, f"liveness probe failed: {msg}")

    def _adopt(self, status: dict[str, Any]) -> None:
        """A pod that already ran (before a runner restart): its processes are gone, so this
        start counts as a restart, as after a node reboot."""
        self._last_env = {}
        for cs in status.get("containerStatuses") or []:
            for c in self.containers:
                if c.name == cs.get("name"):
                    c.restart_count = int(cs.get("restartCount") or 0)
                    state = cs.get("state") or {}
                    if "running" in state or "terminated" in state:
                        c.restart_count += 1
                        c.last_terminated = {
                            "exitCode": 137,
                            "reason": "NodeRunnerRestarted",
                            "startedAt": (state.get("running") or {}).get("startedAt"),
                            "finishedAt": timestamp(),
                        }
                    elif cs.get("lastState", {}).get("terminated"):
                        c.last_terminated = cs["lastState"]["terminated"]

    def _restart(self, c: Container, why: str) -> None:
        """A failed liveness or startup probe: stop the container (grace period), restart it."""
        log.info("%s/%s %s: %s; restarting", self.ns, self.pod_name, c.name, why)
        code = self._stop_container(c, self._grace())
        self._on_exit(c, code, reason="Error", message=why)
        c.next_start = time.monotonic()  # a probe kill restarts at once (back-off is for exits)
