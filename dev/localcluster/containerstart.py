"""What the container runtime says when it cannot start a container whose command its image does
not hold, and what the kubelet then does: kwok runs nothing, so without this a pod whose
`spec.engine.image` is an image without `vllm` (the operator's own image, busybox) would run on
kwok's nodes where a kubelet's never starts it. The kwok gate asks it through podrefs.check.

The lab knows images by what they are, not by their files (kwok has none): IMAGE_COMMANDS holds,
per repository, which of the commands LLMFleet and the lab's tools render (COMMANDS) the image
holds. A command outside COMMANDS, or an image not listed, is not judged: it starts, as before.

The words, from pkg/kubelet/kuberuntime/kuberuntime_container.go (startContainer) and
pkg/kubelet/kubelet_pods.go, with containerd 2 and runc 1.2 underneath:

* each attempt: Events Normal `Created` (`Created container: NAME`) and Warning `Failed`
  (`Error: <the runtime's error>`); the container waits in `RunContainerError` with that error,
  and its instance ends `StartError`, exit code 128, with the same message (lastState);
* between attempts (restartPolicy Always or OnFailure): waiting `CrashLoopBackOff`, `back-off
  10s restarting failed container=NAME pod=POD_NS(UID)` (10 s, doubling, at most 300 s), and a
  Warning `BackOff` (`Back-off restarting failed container NAME in pod POD_NS(UID)`);
* under restartPolicy Never (a Job's pod): the pod ends Failed, the container terminated
  `StartError`, exit code 128.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from llmfleet.models import DEFAULT_BATCH_IMAGE, DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE
from llmfleet.models.router import DEFAULT_ROUTER_IMAGE

from .imagepull import normalised, parse_error
from .podrefs import Exit, Note, Refusal

BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # the kubelet's crash-loop back-off
START_ERROR_CODE = 128
# The commands the lab judges: what LLMFleet renders (vllm, python3 for the batch runner,
# vllm-router, llmfleet for the adapter fetcher) and what the lab's own pods run.
COMMANDS = frozenset({"vllm", "python3", "python", "vllm-router", "llmfleet", "sh", "sleep"})
_PYTHON_SLIM = frozenset({"python3", "python", "sh", "sleep"})  # python:3.11-slim-bookworm
_VLLM = _PYTHON_SLIM | {"vllm"}  # vllm/vllm-openai: Ubuntu, its python and vllm


def _repository(ref: str) -> str:
    name = normalised(ref).split("@", 1)[0]
    head, _, tail = name.rpartition(":")
    return head if head and "/" not in tail else name


# repository -> the commands of COMMANDS its images hold (any tag or digest of it).
IMAGE_COMMANDS: dict[str, frozenset[str]] = {
    _repository(DEFAULT_ENGINE_IMAGE): _VLLM,
    _repository(DEFAULT_BATCH_IMAGE): _VLLM | {"llmfleet"},  # images/vllm: the llmfleet wheel
    _repository(DEFAULT_ROUTER_IMAGE): _PYTHON_SLIM | {"vllm-router"},  # images/router
    _repository(DEFAULT_FETCHER_IMAGE): _PYTHON_SLIM | {"llmfleet"},  # images/operator
    "docker.io/llmfleet/operator": _PYTHON_SLIM | {"llmfleet"},
    "docker.io/library/busybox": frozenset({"sh", "sleep"}),
}


def start_error(ref: str, command: str) -> str | None:
    """The runtime's error for starting `command` in an image of `ref`, or None when the image
    holds it or the lab cannot tell."""
    if parse_error(ref) is not None or "$(" in command:
        return None
    held = IMAGE_COMMANDS.get(_repository(ref))
    name = command.rsplit("/", 1)[-1]
    if held is None or name not in COMMANDS or name in held:
        return None
    why = (
        f"stat {command}: no such file or directory"
        if command.startswith("/")
        else "executable file not found in $PATH"
    )
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create "
        "failed: runc create failed: unable to start container process: error during container "
        f'init: exec: "{command}": {why}: unknown'
    )


def pod_words(pod: Mapping[str, Any]) -> str:
    """A pod as the kubelet's messages name it (format.Pod): NAME_NAMESPACE(UID)."""
    meta = pod["metadata"]
    return f"{meta['name']}_{meta['namespace']}({meta['uid']})"


class Starter:
    """One pod's container starts on one node: each container's attempts and crash-loop back-off
    (the kubelet keys it by pod and container)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # container -> (attempts so far, when the next may start, the back-off that led there)
        self._tries: dict[str, tuple[int, float, float]] = {}

    def check(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Refusal | None:
        """Why the runtime would not start `container` now, or None. Each call past the back-off
        is a new attempt."""
        command = [str(c) for c in container.get("command") or []]
        if not command:
            return None  # the image's entrypoint: not known here
        error = start_error(str(container.get("image") or ""), command[0])
        if error is None:
            return None
        name = str(container["name"])
        policy = str(pod["spec"].get("restartPolicy") or "Always")
        now = self._clock()
        with self._lock:
            attempts, retry_at, delay = self._tries.get(name, (0, 0.0, 0.0))
            if attempts and policy == "Never":
                return _ended(name, error)  # said already: the same words, no new Event
            if attempts and now < retry_at:
                backoff = f"back-off {delay:.0f}s restarting failed container={name}"
                said = f"{backoff} pod={pod_words(pod)}"
                note = f"Back-off restarting failed container {name} in pod {pod_words(pod)}"
                return Refusal(
                    name,
                    "CrashLoopBackOff",
                    said,
                    "BackOff",
                    note,
                    restarts=attempts - 1,
                    exited=Exit(START_ERROR_CODE, "StartError", error),
                )
            delay = min(BACKOFF_MAX, delay * 2) if delay else BACKOFF_START
            self._tries[name] = (attempts + 1, now + delay, delay)
        if policy == "Never":
            return _ended(name, error)
        return Refusal(
            name,
            "RunContainerError",
            error,
            "Failed",
            f"Error: {error}",
            (_created(name),),
            restarts=attempts,
            exited=Exit(START_ERROR_CODE, "StartError", error),
        )


def _created(name: str) -> Note:
    return Note("Normal", "Created", f"Created container: {name}")


def _ended(name: str, error: str) -> Refusal:
    """Under restartPolicy Never: the container ended StartError, and the pod with it."""
    return Refusal(
        name,
        "StartError",
        error,
        "Failed",
        f"Error: {error}",
        (_created(name),),
        exited=Exit(START_ERROR_CODE, "StartError", error),
        ended=True,
    )
