"""Starting a pod's containers, as host processes or, for a built image, in crun (oci.py), and
what a kubelet does when one exits: the restart policy and the crash-loop back-off."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from .. import containerstart, podrefs
from . import oci, procs, volumes
from .adaptations import adapt_command, is_vllm_server, stand_in
from .bundle import ContainerConfigError
from .container import BACKOFF_START, Container, timestamp
from .gpurequest import requested_gpus
from .podenv import MissingKeyError, container_env, expand, process_env
from .podstate import PodState
from .volumes import VolumeNotReadyError

# pods.py's logger: a pod's log lines keep the name they had before its worker was split.
log = logging.getLogger("noderunner.pods")

BACKOFF_MAX = 300.0
# How soon a container refused for a missing Secret or ConfigMap is tried again (podrefs.py): the
# kubelet retries on its pod sync back-off; here a few seconds, so a test need not wait for it.
REFUSED_RETRY = 2.0


class ContainerStarts(PodState):
    """The part of PodWorker (pods.py) that starts its containers and handles their exits."""

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
                read_secret=self.hooks.read_secret,
                read_configmap=self.hooks.read_configmap,
            )
        except MissingKeyError as e:
            self._waiting(c, "CreateContainerConfigError", str(e))
            return None
        env[procs.MARKER_ENV] = procs.marker(self.hooks.runner_id, self.uid, c.name)
        return env

    def _refuse(self, c: Container, refused: podrefs.Refusal) -> None:
        """Wait as a kubelet does for a missing Secret or ConfigMap, or an image this node cannot
        pull, saying so once per cause (a kubelet counts the repeats of one Event instead)."""
        c.waiting_reason, c.waiting_message = refused.waiting_reason, refused.waiting_message
        c.next_start = time.monotonic() + REFUSED_RETRY
        if refused.event_message not in self._said:
            self._said.add(refused.event_message)
            log.info("%s/%s %s: %s", self.ns, self.pod_name, c.name, refused.waiting_message)
            try:
                for said in podrefs.events(self.pod, refused, self.hooks.node):
                    self.hooks.post_event(said)
            except Exception as e:  # an Event is worth less than the pod; said again if lost
                self._said.discard(refused.event_message)
                log.warning("%s/%s: event not posted: %s", self.ns, self.pod_name, e)

    def _waiting(self, c: Container, reason: str, message: str) -> None:
        c.waiting_reason, c.waiting_message = reason, message
        c.next_start = time.monotonic() + BACKOFF_START

    def _start(self, c: Container) -> None:
        command = c.spec.get("command") or []
        refused = podrefs.check(self.pod, self.hooks.lookup, [c.name], self.pulls.check)
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
        image = str(c.spec.get("image") or "")
        if (error := containerstart.start_error(image, str(command[0]))) is not None:
            self._start_failed(c, error)
            return
        try:
            c.volumes = volumes.prepare(
                self.pod, c.spec, self.hooks.state_dir, self.hooks.read_configmap
            )
        except VolumeNotReadyError as e:
            self._waiting(c, "ContainerCreating", f"MountVolume.SetUp failed: {e}")
            return
        gpus = self.hooks.gpus
        as_seen = gpus.as_container_sees(env) if gpus is not None else {}
        env = process_env(env, c.volumes, real_gpus=gpus is not None)
        if gpus is not None:
            env = gpus.process_env(env)
            for key, value in as_seen.items():
                env.setdefault(key, value)
            try:
                devices = gpus.allocate(self.uid, requested_gpus(self.pod))
            except RuntimeError as e:
                self._waiting(c, "CreateContainerError", f"GPU allocation failed: {e}")
                return
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
            # A container's /tmp is its pod's volume (the engine's emptyDir), so Inductor's cache
            # (tempfile.gettempdir()/torchinductor_<user>) starts empty with each pod, as on a
            # cluster; here the host's /tmp would carry it from pod to pod. Not TMPDIR: vLLM's
            # IPC sockets live there, and the emulated path is longer than a socket path may be.
            if (tmp := c.volumes.rewrite("/tmp")) != "/tmp":
                env.setdefault("TORCHINDUCTOR_CACHE_DIR", f"{tmp}/torchinductor_root")
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

    def _start_failed(self, c: Container, error: str) -> None:
        """The runtime cannot run the command in the container's image (containerstart.py):
        created, failed to start, and then a crash loop like any failed exit."""
        self._post(c, "Normal", "Created", f"Created container: {c.name}")
        self._post(c, "Warning", "Failed", f"Error: {error}")
        c.started_at = time.time()
        self._on_exit(c, containerstart.START_ERROR_CODE, "StartError", error)

    def _post(self, c: Container, kind: str, reason: str, message: str) -> None:
        """An Event about `c`, as the kubelet posts it."""
        note = podrefs.Note(kind, reason, message)
        try:
            self.hooks.post_event(podrefs.note_event(self.pod, c.name, note, self.hooks.node))
        except Exception as e:  # an Event is worth less than the pod
            log.warning("%s/%s: event not posted: %s", self.ns, self.pod_name, e)

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
        except (ContainerConfigError, OSError, subprocess.CalledProcessError) as e:
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
        c.vllm_server = is_vllm_server(argv)
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
        pod = containerstart.pod_words(self.pod)
        c.waiting_reason = "CrashLoopBackOff"
        c.waiting_message = (
            f"back-off {c.backoff:.0f}s restarting failed container={c.name} pod={pod}"
        )
        self._post(
            c, "Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod {pod}"
        )
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


def _header(logf: IO[bytes], text: str) -> None:
    logf.write(f"\n{volumes.RUNNER_HEADER}{timestamp()} node-runner: {text}\n".encode())
    logf.flush()
