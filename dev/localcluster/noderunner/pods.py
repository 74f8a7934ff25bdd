"""One pod on the local node: its containers as processes, probed, restarted and stopped like a
kubelet does it, with the pod's status written back through pods/status."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .. import podrefs
from . import oci, procs, volumes
from .adaptations import VLLM_MODULE, Context, adapt_command, adapt_env, stand_in
from .probes import ProbeState, check
from .volumes import PodVolumes, VolumeNotReadyError

log = logging.getLogger("noderunner.pods")

BACKOFF_START = 10.0  # the kubelet's crash-loop back-off: 10 s, doubling, at most 300 s
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
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def timestamp(t: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(time.time() if t is None else t, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in env values, command and args; $$ escapes."""
    parts = text.split("$$")
    return "$".join(_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), p) for p in parts)


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


@dataclass
class Container:
    spec: dict[str, Any]
    restart_count: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0  # wall clock
    started_mono: float = 0.0
    started: bool = False
    ready: bool = False
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    next_start: float = 0.0  # monotonic
    backoff: float = BACKOFF_START
    last_terminated: dict[str, Any] | None = None
    finished: bool = False  # terminated and not restarting (restartPolicy)
    probes: dict[str, ProbeState] = field(default_factory=dict)
    volumes: PodVolumes | None = None
    vllm_server: bool = False  # runs vLLM's OpenAI API server (MODEL_NICE applies)
    next_renice: float = 0.0  # monotonic

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def __post_init__(self) -> None:
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if self.spec.get(kind):
                self.probes[kind] = ProbeState(self.spec[kind])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


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
        self.transitions: dict[str, str] = {}
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
        env: dict[str, str] = dict(base)
        env["HOSTNAME"] = self.pod_name
        for e in c.spec.get("env") or []:
            name = e["name"]
            if "valueFrom" not in e:
                env[name] = expand(str(e.get("value", "")), env)
                continue
            src = e["valueFrom"]
            value: str | None
            if "secretKeyRef" in src:
                ref = src["secretKeyRef"]
                value = self.hooks.read_secret_key(self.ns, ref["name"], ref["key"])
                if value is None and not ref.get("optional"):
                    self._waiting(
                        c, "CreateContainerConfigError", f'secret "{ref["name"]}" not found'
                    )
                    return None
            elif "configMapKeyRef" in src:
                ref = src["configMapKeyRef"]
                value = self.hooks.read_configmap_key(self.ns, ref["name"], ref["key"])
                if value is None and not ref.get("optional"):
                    self._waiting(
                        c, "CreateContainerConfigError", f'configmap "{ref["name"]}" not found'
                    )
                    return None
            elif "fieldRef" in src and (found := _metadata_map_ref(self.pod, src)) is not None:
                value = found  # e.g. a Job's metadata.annotations['...job-completion-index']
            elif "fieldRef" in src:
                value = {
                    "metadata.name": self.pod_name,
                    "metadata.namespace": self.ns,
                    "metadata.uid": self.uid,
                    "status.podIP": self.ip,
                    "status.hostIP": "127.0.0.1",
                    "spec.nodeName": self.hooks.node,
                    "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
                }.get(src["fieldRef"]["fieldPath"], "")
            else:
                value = ""  # resourceFieldRef: no resources to report
            if value is not None:
                env[name] = value
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

    def _condition(self, kind: str, ok: bool) -> dict[str, Any]:
        value = "True" if ok else "False"
        key = f"{kind}={value}"
        if key not in self.transitions:
            self.transitions = {
                k: v for k, v in self.transitions.items() if not k.startswith(kind + "=")
            }
            self.transitions[key] = timestamp()
        return {"type": kind, "status": value, "lastTransitionTime": self.transitions[key]}

    def _container_status(self, c: Container) -> dict[str, Any]:
        state: dict[str, Any]
        if c.running():
            state = {"running": {"startedAt": timestamp(c.started_at)}}
        elif c.finished and c.last_terminated:
            state = {"terminated": c.last_terminated}
        else:
            reason = c.waiting_reason or "ContainerCreating"
            state = {
                "waiting": {
                    "reason": reason,
                    **({"message": c.waiting_message} if c.waiting_message else {}),
                }
            }
        out: dict[str, Any] = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "ready": c.ready and c.running(),
            "started": c.started and c.running(),
            "restartCount": c.restart_count,
            "state": state,
            "lastState": {},
        }
        if c.proc is not None:
            out["containerID"] = f"localproc://{c.proc.pid}"
        if c.last_terminated and not (c.finished and "terminated" in state):
            out["lastState"] = {"terminated": c.last_terminated}
        return out

    def _publish(self, force_not_ready: bool = False) -> None:
        statuses = [self._container_status(c) for c in self.containers]
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
                self._condition("PodReadyToStartContainers", True),
                self._condition("Initialized", True),
                self._condition("Ready", ready),
                self._condition("ContainersReady", containers_ready),
                self._condition("PodScheduled", True),
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


def gates_pass(pod: Mapping[str, Any]) -> bool:
    gates = [str(g.get("conditionType")) for g in pod["spec"].get("readinessGates") or []]
    conditions = (pod.get("status") or {}).get("conditions") or []
    true = {str(c.get("type")) for c in conditions if c.get("status") == "True"}
    return all(g in true for g in gates)


_MAP_REF = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")


def _metadata_map_ref(pod: Mapping[str, Any], source: Mapping[str, Any]) -> str | None:
    """A fieldRef to metadata.annotations['k'] or metadata.labels['k'] (as Indexed Jobs use for
    JOB_COMPLETION_INDEX); None for other paths."""
    match = _MAP_REF.match(str(source["fieldRef"].get("fieldPath", "")))
    if match is None:
        return None
    values = pod["metadata"].get(match.group(1)) or {}
    return str(values.get(match.group(2), ""))


def _header(logf: IO[bytes], text: str) -> None:
    logf.write(f"\n===== {timestamp()} node-runner: {text}\n".encode())
    logf.flush()


def decode_secret(data: Mapping[str, str] | None, key: str) -> str | None:
    if not data or key not in data:
        return None
    return base64.b64decode(data[key]).decode()


def process_env(env: dict[str, str], mounts: PodVolumes) -> dict[str, str]:
    """A container's environment as its process gets it. The pod's own paths map to the emulated
    volumes first; what the runner adds after that is a host path (a checkout under /tmp must
    not be mistaken for the pod's `/tmp` emptyDir)."""
    return adapt_env({k: mounts.rewrite(v) for k, v in env.items()})


def base_env(python: Path) -> dict[str, str]:
    """What every container process starts from (a container image's usual environment)."""
    return {
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
