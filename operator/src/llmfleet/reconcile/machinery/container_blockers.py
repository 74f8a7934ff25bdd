"""What the kubelet says of a pod's containers when they cannot run, as `Blocker`s: every waiting
reason but the two of a container that is on its way (ContainerCreating, PodInitializing), a
crash loop with the container's last termination, and a pod the kubelet gave up on (Evicted, a
container OOMKilled under `restartPolicy: Never`).

Known reasons are attributed to the spec field behind them; any other is quoted as the kubelet
wrote it, under its own name: a reason nobody listed here still reaches status. A container the
runtime could not start because its image cannot run the command the operator renders (no such
executable, or one built for another platform) is the image's field: RunContainerError,
CreateContainerError (CRI-O says it at create), a crash loop whose last exit is StartError
(containerd) or ContainerCannotRun, and a Job's pod that ended so."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .causes import (
    IMAGE,
    IMAGE_ERRORS,
    NOT_FOUND,
    RESOURCES,
    Blocker,
    Reference,
    Said,
    as_reason,
    missing,
    missing_key,
)
from .exit_words import advice_for, last_words

_NO_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) [^/\s]+/(\S+)")
# A container on its way: the kubelet says these while it mounts volumes and pulls, not of a fault.
ON_ITS_WAY = ("ContainerCreating", "PodInitializing")
CRASH_LOOP = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"
# What an eviction says of the pod's own use: its cpu/memory requests were too low for it.
_OVER_REQUEST = re.compile(r"exceeds its request", re.IGNORECASE)
_LIMIT = 300
# The runtime's words for an image that cannot run the container's command: containerd and runc,
# CRI-O and crun, and any of them for a binary of another platform.
_CANNOT_RUN = re.compile(
    r'exec: "[^"]+": (?:executable file not found in \$PATH|stat [^:]+: no such file or directory)'
    r"|executable file `[^`]+` not found in \$PATH|exec format error"
)
# The exit reasons of a container the runtime created but could not start.
_START_FAILED = ("StartError", "ContainerCannotRun")
# During the pull back-off a kubelet (1.32 and later) says `Back-off pulling image "REF":
# ErrImagePull: <the last pull's error>`, between pulls that say the error alone: the cause is
# that error either way, so that status and its Event do not change with every attempt.
_PULL_BACKOFF = re.compile(r'Back-off pulling image "[^"]*": \w+: (?=.)')


def _stem(refs: Sequence[Reference], container: str) -> str:
    """What the container is called in a reason: Engine, Router, or Container."""
    for r in refs:
        if r.kind == IMAGE and r.name == container and r.stem.endswith("Image"):
            return r.stem.removesuffix("Image")
    return "Container"


def _field(refs: Sequence[Reference], kind: str, container: str) -> str:
    return next((r.field for r in refs if r.kind == kind and r.name == container), "")


def _config_error(message: str, refs: Sequence[Reference], said: Said) -> Blocker:
    if found := NOT_FOUND.search(message):
        return missing(refs, found.group(1), found.group(2), said_as(said, found.group(0)))
    if no_key := _NO_KEY.search(message):
        key, kind, obj = no_key.groups()
        return missing_key(refs, kind.lower(), obj, key, said_as(said, no_key.group(0)))
    return said.blocker("", "CreateContainerConfigError")


def said_as(said: Said, cause: str) -> Said:
    return Said(cause, said.by, said.pod)


def _image(cs: Mapping[str, Any], message: str, refs: Sequence[Reference], said: Said) -> Blocker:
    image = str(cs.get("image") or "")
    message = _PULL_BACKOFF.sub("", message, count=1)
    cause = f'cannot pull image "{image}"' + (f": {message[:_LIMIT]}" if message else "")
    mine = [r for r in refs if r.kind == IMAGE and r.name == cs.get("name")]
    if mine:
        return said_as(said, cause).blocker(mine[0].field, mine[0].stem + "PullFailed")
    return said_as(said, cause).blocker("", "ImagePullFailed")


def _cannot_run(
    name: str, image: str, message: str, refs: Sequence[Reference], said: Said
) -> Blocker | None:
    """A container its image cannot run, attributed to the image's field; None for another
    failure to start."""
    found = _CANNOT_RUN.search(message)
    if found is None:
        return None
    where = f' in image "{image}"' if image else ""
    cause = f"container {name} cannot start{where}: {found.group(0)}"
    mine = [r for r in refs if r.kind == IMAGE and r.name == name]
    if mine:
        return said_as(said, cause).blocker(mine[0].field, mine[0].stem + "StartFailed")
    return said_as(said, cause).blocker("", "ImageStartFailed")


def _terminated(
    cs: Mapping[str, Any],
    terminated: Mapping[str, Any],
    refs: Sequence[Reference],
    said: Said,
    again: bool = True,
) -> Blocker:
    """A container that exited: OOMKilled is its memory limit (spec.engine.resources); any other
    exit is quoted with its code and the last line it wrote (terminationMessagePolicy
    FallbackToLogsOnError puts the log's tail there)."""
    name, image = str(cs.get("name") or ""), str(cs.get("image") or "")
    reason = str(terminated.get("reason") or "Error")
    code = int(terminated.get("exitCode") or 0)
    if reason in _START_FAILED and (
        blocker := _cannot_run(name, image, str(terminated.get("message") or ""), refs, said)
    ):
        return blocker
    words = last_words(str(terminated.get("message") or ""))
    how = f"keeps exiting (last: {reason}" if again else f"exited ({reason}"
    cause = f"container {name} {how}, exit code {code})" + (f": {words}" if words else "")
    # Not for OOMKilled: that is host memory (the container's limit), not the GPU's.
    if reason != OOM_KILLED and (advice := advice_for(f"{reason} {words}")):
        cause += f"; {advice}"
    stem = _stem(refs, name)
    if reason == OOM_KILLED:
        field = _field(refs, RESOURCES, name)
        return said_as(said, cause).blocker(field, stem + OOM_KILLED)
    return said_as(said, cause).blocker("", stem + "CrashLoop")


def _last_exit(cs: Mapping[str, Any]) -> Mapping[str, Any]:
    return (cs.get("lastState") or {}).get("terminated") or {}


def _restarted_unready(cs: Mapping[str, Any]) -> bool:
    """Between two back-offs: started again after a failed exit, not ready yet."""
    state = cs.get("state") or {}
    failed_last = int(_last_exit(cs).get("exitCode") or 0) != 0
    return (
        "running" in state and not cs.get("ready") and bool(cs.get("restartCount")) and failed_last
    )


def _waiting(cs: Mapping[str, Any], refs: Sequence[Reference], pod: str) -> Blocker | None:
    if _restarted_unready(cs):
        # Said as the back-off itself is, so that status does not change with every restart.
        said = Said("", f"kubelet: {CRASH_LOOP}", pod)
        return _terminated(cs, _last_exit(cs), refs, said)
    waiting = (cs.get("state") or {}).get("waiting") or {}
    reason, message = str(waiting.get("reason") or ""), str(waiting.get("message") or "")
    if not reason or reason in ON_ITS_WAY:
        return None
    said = Said(message[:_LIMIT] or reason, f"kubelet: {reason}", pod)
    if reason == "CreateContainerConfigError":
        return _config_error(message, refs, said)
    if reason in IMAGE_ERRORS:
        return _image(cs, message, refs, said)
    name, image = str(cs.get("name") or ""), str(cs.get("image") or "")
    if reason == CRASH_LOOP:
        # The back-off message names the pod and the delay, which grows: the last exit is stable.
        return _terminated(cs, _last_exit(cs), refs, said)
    if reason in ("RunContainerError", "CreateContainerError") and (
        blocker := _cannot_run(name, image, message, refs, said)
    ):
        return blocker
    # CreateContainerError, RunContainerError and any reason a future kubelet adds: quoted.
    return said_as(said, f"container {name}: {message[:_LIMIT] or reason}").blocker(
        "", as_reason(reason)
    )


def _given_up(pod: Mapping[str, Any], refs: Sequence[Reference]) -> list[Blocker]:
    """A pod that ended Failed: evicted, refused by the kubelet's admission, or a container that
    exited under `restartPolicy: Never` (a batch shard) with OOMKilled or that its image cannot
    run (StartError)."""
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    if status.get("reason") == "Evicted":
        message = str(status.get("message") or "evicted")
        said = Said(message[:_LIMIT], "kubelet: Evicted", name)
        engine = next((r for r in refs if r.kind == RESOURCES), None)
        field = engine.field if engine and _OVER_REQUEST.search(message) else ""
        return [said.blocker(field, "Evicted")]
    if reason := str(status.get("reason") or ""):
        # The kubelet's admission refusals (OutOfcpu, NodeAffinity, UnexpectedAdmissionError)
        # and any other reason it ends a pod with: quoted.
        message = str(status.get("message") or reason)[:_LIMIT]
        return [Said(message, f"kubelet: {reason}", name).blocker("", as_reason(reason))]
    out = []
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        ended = str(terminated.get("reason") or "")
        if ended == OOM_KILLED or ended in _START_FAILED:
            said = Said("", f"kubelet: {ended}", name)
            out.append(_terminated(cs, terminated, refs, said, again=False))
    return out


def kubelet_blockers(
    pod: Mapping[str, Any], refs: Sequence[Reference], others_run: bool
) -> list[Blocker]:
    """What the kubelet says keeps `pod` from running. A Failed pod counts only while no pod of
    the set runs (`others_run`): once its replacement runs, it is history, not a cause."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return [] if others_run else _given_up(pod, refs)
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    name = pod["metadata"]["name"]
    return [b for cs in containers if (b := _waiting(cs, refs, name)) is not None]
