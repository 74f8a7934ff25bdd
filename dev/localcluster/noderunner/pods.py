"""One pod on the local node: its containers as processes, probed, restarted and stopped like a
kubelet does it, with the pod's status written back through pods/status."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .. import podrefs
from . import oci, procs, volumes
from .adaptations import VLLM_MODULE, Context, adapt_command, stand_in
from .container import (
    BACKOFF_START,
    Conditions,
    Container,
    container_status,
    gates_pass,
    timestamp,
)
from .podenv import MissingKeyError, container_env, expand, process_env
from .probes import check
from .volumes import VolumeNotReadyError

log = logging.getLogger("noderunner.pods")

BACKOFF_MAX = 300.0
BACKOFF_RESET_AFTER = 600.0  # running this long forgives earlier crashes
TICK = 0.5
# How soon a container refused for a missing Secret or ConfigMap is tried again (podrefs.py): the
# kubelet retries on its pod sync back-off; here a few seconds, so a test need not wait for it.
REFUSED_RETRY = 2.0
# The model's processes of a vLLM server pod (engine core, workers) run below its API server:
# on a GPU node the model runs on the GPU and the API server has the host's CPUs; here the model
# runs on the same 2 cores, and at equal priority it starved the API server, which then delivered
# finished responses seconds late, in bursts (docs/cpu-adaptations.md, "priority").
MODEL_NICE = 10
RENICE_EVERY = 2.0


@dataclass
class Hooks:
    """What a pod worker needs from the runner."""

    context: Callable[[str], Context]  # pod IP -> adaptation context
    read_secret_key: Callable[[str, str, str], str | None]  # namespace, name, key
    read_configmap_key: Callable[[str, str, str], str | None]
    read_configmap: volumes.ReadConfigMap  # namespace, name -> data (configMap volumes)
    patch_status: Callable[[str, str, dict[str, Any]], None]  # namespace, name, status
    delete_pod: Callable[[str, str, str], None]  # namespace, name, uid
    log_dir: Path
    node: str
    runner_id: str  # procs.runner_id(): marks this runner's processes
    base_env: Mapping[str, str]
    state_dir: Path  # volumes are emulated under it (see volumes.py)
    lookup: podrefs.Lookup  # kind, namespace, name -> keys of a Secret / ConfigMap, None: missing
    post_event: Callable[[dict[str, Any]], None]  # a core/v1 Event, as the kubelet posts one
    containers: oci.Node | None = None  # runs containers of built images (oci.py)


class PodWorker(threading.Thread):
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
        if c.vllm_server and now >= c.next_renice:
            marker = procs.marker(self.hooks.runner_id, self.uid, c.name)
            procs.lower_priority(marker, spare=c.proc.pid, nice=MODEL_NICE)
            c.next_renice = now + RENICE_EVERY
        self._probe(c, now)

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

    # --- containers -------------------------------------------------------------------------

    _last_env: dict[str, dict[str, str]]

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

    def _env(self, c: Container, base: Mapping[str, str]) -> dict[str, str] | None:
        try:
            env = container_env(
                self.pod,
                c.spec,
                base,
                ip=self.ip,
                node=self.hooks.node,
                read_secret_key=self.hooks.read_secret_key,
                read_configmap_key=self.hooks.read_configmap_key,
            )
        except MissingKeyError as e:
            self._waiting(c, "CreateContainerConfigError", str(e))
            return None
        env[procs.MARKER_ENV] = procs.marker(self.hooks.runner_id, self.uid, c.name)
        return env

    def _refuse(self, c: Container, refused: podrefs.Refusal) -> None:
        """Wait as a kubelet does for a missing Secret or ConfigMap, saying so once per cause."""
        c.waiting_reason, c.waiting_message = refused.waiting_reason, refused.waiting_message
        c.next_start = time.monotonic() + REFUSED_RETRY
        if refused.event_message not in self._said:
            self._said.add(refused.event_message)
            log.info("%s/%s %s: %s", self.ns, self.pod_name, c.name, refused.event_message)
            try:
                self.hooks.post_event(podrefs.event(self.pod, refused, self.hooks.node))
            except Exception as e:  # an Event is worth less than the pod; said again if lost
                self._said.discard(refused.event_message)
                log.warning("%s/%s: event not posted: %s", self.ns, self.pod_name, e)

    def _waiting(self, c: Container, reason: str, message: str) -> None:
        c.waiting_reason, c.waiting_message = reason, message
        c.next_start = time.monotonic() + BACKOFF_START

    def _start(self, c: Container) -> None:
        command = c.spec.get("command") or []
        refused = podrefs.check(self.pod, self.hooks.lookup, [c.name])
        if refused is not None:
            self._refuse(c, refused)
            return
        node = self.hooks.containers
        if node is not None and node.image(c.spec) is not None:
            self._start_container(c, node)
            return
        if not command:
            self._waiting(c, "CreateContainerError", "the node runner needs an explicit command")
            c.finished = True
            return
        env = self._env(c, self.hooks.base_env)
        if env is None:
            return
        try:
            c.volumes = volumes.prepare(
                self.pod, c.spec, self.hooks.state_dir, self.hooks.read_configmap
            )
        except VolumeNotReadyError as e:
            self._waiting(c, "ContainerCreating", f"MountVolume.SetUp failed: {e}")
            return
        env = process_env(env, c.volumes)
        self._last_env[c.name] = env
        argv = adapt_command(
            [c.volumes.rewrite(expand(a, env)) for a in command],
            [c.volumes.rewrite(expand(a, env)) for a in c.spec.get("args") or []],
            self.hooks.context(self.ip),
        )
        annotations = self.pod["metadata"].get("annotations") or {}
        if (engine := stand_in(argv, env, annotations)) is not None:
            argv, env = engine
        workdir = c.spec.get("workingDir")
        cwd = workdir if workdir and Path(workdir).is_dir() else str(self.hooks.log_dir)
        self._spawn(c, argv, env, cwd)

    def _start_container(self, c: Container, node: oci.Node) -> None:
        """A container of a built image, run by crun (oci.py) with its volumes mounted."""
        env = self._env(c, {})
        if env is None:
            return
        try:
            c.volumes = volumes.prepare(
                self.pod,
                c.spec,
                self.hooks.state_dir,
                self.hooks.read_configmap,
                request_token=lambda seconds, audience: node.pod_token(self.pod, seconds, audience),
            )
            spec: dict[str, Any] = dict(c.spec)
            for key in ("command", "args"):
                if key in spec:
                    spec[key] = [expand(a, env) for a in spec[key]]
            argv = node.command(self.pod, spec, env, c.volumes, self.ip)
        except VolumeNotReadyError as e:
            self._waiting(c, "ContainerCreating", f"MountVolume.SetUp failed: {e}")
            return
        except (oci.ContainerConfigError, OSError, subprocess.CalledProcessError) as e:
            self._waiting(c, "CreateContainerConfigError", str(e))
            return
        self._last_env[c.name] = env
        runtime_env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            procs.MARKER_ENV: env[procs.MARKER_ENV],
        }
        self._spawn(c, argv, runtime_env, str(self.hooks.log_dir))

    def _spawn(self, c: Container, argv: list[str], env: dict[str, str], cwd: str) -> None:
        with open(self.log_path, "ab") as logf:
            _header(logf, f"start {c.name} (restart {c.restart_count}) on {self.ip}: {argv}")
            # Same process group as the runner: when the runner's group is signalled (Cluster.down)
            # every pod process goes with it. Deletion signals only the main process, as a
            # container runtime signals PID 1.
            c.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
            )
        c.started_at, c.started_mono = time.time(), time.monotonic()
        c.started = c.ready = False
        c.vllm_server = VLLM_MODULE in argv
        for p in c.probes.values():
            p.reset(c.started_mono)
        log.info(
            "%s/%s %s: started pid %d on %s", self.ns, self.pod_name, c.name, c.proc.pid, self.ip
        )

    def _on_exit(self, c: Container, code: int, reason: str, message: str = "") -> None:
        procs.kill_all(procs.marker(self.hooks.runner_id, self.uid, c.name))
        exit_code = code if code >= 0 else 128 - code
        message = message or self._termination_message(c, exit_code)
        c.last_terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": timestamp(c.started_at),
            "finishedAt": timestamp(),
            **({"message": message} if message else {}),
        }
        c.proc = None
        c.started = c.ready = False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if policy == "Never" or (policy == "OnFailure" and code == 0):
            c.finished = True
            return
        c.restart_count += 1
        c.next_start = time.monotonic() + c.backoff
        c.waiting_reason, c.waiting_message = "CrashLoopBackOff", f"back-off {c.backoff:.0f}s"
        c.backoff = min(BACKOFF_MAX, c.backoff * 2)
        log.info(
            "%s/%s %s: exited %d (%s); restart in %.0fs",
            self.ns,
            self.pod_name,
            c.name,
            code,
            reason,
            c.next_start - time.monotonic(),
        )
        with open(self.log_path, "ab") as logf:
            _header(logf, f"{c.name} exited {code} ({reason}) {message}")

    def _termination_message(self, c: Container, exit_code: int) -> str:
        return volumes.termination_message(
            c.volumes, exit_code, c.spec.get("terminationMessagePolicy"), self.log_path
        )

    def _restart(self, c: Container, why: str) -> None:
        """A failed liveness or startup probe: stop the container (grace period), restart it."""
        log.info("%s/%s %s: %s; restarting", self.ns, self.pod_name, c.name, why)
        code = self._stop_container(c, self._grace())
        self._on_exit(c, code, reason="Error", message=why)
        c.next_start = time.monotonic()  # a probe kill restarts at once (back-off is for exits)

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

    # --- termination -------------------------------------------------------------------------

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
            hooks = [
                threading.Thread(target=self._pre_stop, args=(c, deadline), daemon=True)
                for c in running
            ]
            for t in hooks:
                t.start()
            for t in hooks:
                t.join(max(0.0, deadline - time.monotonic()))
        remaining = max(2.0, deadline - time.monotonic())  # the kubelet's minimum after preStop
        stoppers = [
            threading.Thread(target=self._stop_and_record, args=(c, remaining), daemon=True)
            for c in running
        ]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
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

    # --- status -----------------------------------------------------------------------------

    def _publish(self, force_not_ready: bool = False) -> None:
        statuses = [container_status(c) for c in self.containers]
        containers_ready = not force_not_ready and all(s["ready"] for s in statuses)
        # As the kubelet: a pod with readiness gates is Ready only once every gate's condition,
        # which another controller writes into status, is True as well.
        ready = containers_ready and gates_pass(self.pod)
        if all(c.finished for c in self.containers):
            codes = [(c.last_terminated or {}).get("exitCode", 0) for c in self.containers]
            phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
        elif any(c.proc is not None or c.restart_count for c in self.containers):
            phase = "Running"
        else:
            phase = "Pending"
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "conditions": [
                self.conditions("PodReadyToStartContainers", True),
                self.conditions("Initialized", True),
                self.conditions("Ready", ready),
                self.conditions("ContainersReady", containers_ready),
                self.conditions("PodScheduled", True),
            ],
            "containerStatuses": statuses,
        }
        if status == self.last_status:
            return
        try:
            self.hooks.patch_status(self.ns, self.pod_name, status)
            self.last_status = status
        except Exception as e:  # the API may be briefly away; the next tick retries
            log.warning("%s/%s: status update failed: %s", self.ns, self.pod_name, e)


def _header(logf: IO[bytes], text: str) -> None:
    logf.write(f"\n===== {timestamp()} node-runner: {text}\n".encode())
    logf.flush()
