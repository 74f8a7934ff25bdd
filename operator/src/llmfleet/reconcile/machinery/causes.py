"""The vocabulary of why a child pod cannot run: the spec fields that name objects (`Reference`),
one pod's cause attributed to one of them (`Blocker`), and how causes read in a condition
message. pod_blockers derives the blockers from the pods; this module holds what both kinds'
status code and that derivation share."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# What a reference points at, as the scheduler and the kubelet name the kind.
SECRET = "secret"
CONFIGMAP = "configmap"
CLAIM = "persistentvolumeclaim"
NODES = "nodes"  # a nodeSelector (the GPU product) that no node may match
TAINTS = "taints"  # the tolerations a GPU profile gives, which no node's taints may match
IMAGE = "image"  # a container's image, matched by container name
RESOURCES = "resources"  # a container's cpu/memory requests and limits, by container name

# The reasons a blocker carries when the scheduler names no spec field (the rest are built from a
# Reference's stem or quote the kubelet's own word): condition reasons both kinds' users read.
INSUFFICIENT_GPUS = "InsufficientGPUs"  # capacity: more GPUs than the cluster has free
INSUFFICIENT_RESOURCES = "InsufficientResources"
VOLUME_NOT_BOUND = "VolumeNotBound"
UNTOLERATED_TAINT = "UntoleratedTaint"
UNSCHEDULABLE = "Unschedulable"

IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
MOUNT_EVENT = "FailedMount"
ATTACH_EVENT = "FailedAttachVolume"
# The Events the kubelet and the attach/detach controller write, and nowhere else, while a pod
# waits for its volumes.
VOLUME_EVENTS = (MOUNT_EVENT, ATTACH_EVENT)
_REASON_CHARS = re.compile(r"[^A-Za-z0-9_]")
# How the kubelet and the volume plugins name an object a pod refers to that does not exist.
NOT_FOUND = re.compile(r'\b(secret|configmap|persistentvolumeclaim) "([^"]+)" not found')


def as_reason(said: str) -> str:
    """A word Kubernetes said (a waiting reason nobody listed) as a condition reason: CamelCase
    already, but kept within what the API server admits for one."""
    word = _REASON_CHARS.sub("", said)
    return word if word[:1].isalpha() else f"Pod{word}"


@dataclass(frozen=True)
class Reference:
    """An object a spec field names: `stem` starts the condition reason when it is missing
    (TokenSecret -> TokenSecretNotFound)."""

    field: str
    kind: str
    name: str
    stem: str
    key: str | None = None


@dataclass(frozen=True)
class Blocker:
    """One pod that cannot run, and why."""

    field: str  # "" when no spec field names the object
    reason: str  # the condition reason
    cause: str  # what Kubernetes said, its stable part
    said_by: str  # "kubelet: CreateContainerConfigError", "scheduler: FailedScheduling"
    pod: str

    @property
    def summary(self) -> str:
        """Field and cause: the same on every retry, the key of one Warning Event."""
        return f"{self.field}: {self.cause}" if self.field else self.cause


def describe(blockers: Sequence[Blocker]) -> str:
    """The blockers for a condition message: one entry per cause, with who said it and a pod."""
    groups: dict[str, list[Blocker]] = {}
    for b in blockers:
        groups.setdefault(b.summary, []).append(b)
    parts = []
    for summary, group in groups.items():
        pods = sorted({b.pod for b in group})
        count = f"{len(pods)} pods, e.g. " if len(pods) > 1 else "pod "
        parts.append(f"{summary} ({group[0].said_by}; {count}{pods[0]})")
    return "; ".join(parts)


def distinct(blockers: Sequence[Blocker]) -> list[Blocker]:
    """One blocker per cause, in order."""
    seen: dict[str, Blocker] = {}
    for b in blockers:
        seen.setdefault(b.summary, b)
    return list(seen.values())


# --- matching what was said against the references --------------------------------------------


@dataclass(frozen=True)
class Said:
    """What one component said about one pod."""

    cause: str
    by: str
    pod: str

    def blocker(self, field: str, reason: str) -> Blocker:
        return Blocker(field, reason, self.cause, self.by, self.pod)


def missing(refs: Iterable[Reference], kind: str, name: str, said: Said) -> Blocker:
    mine = [r for r in refs if r.kind == kind and r.name == name]
    if not mine:
        return said.blocker("", camel(kind) + "NotFound")
    # One object may be named by two fields (the same claim as input and output).
    return said.blocker(
        " and ".join(dict.fromkeys(r.field for r in mine)), mine[0].stem + "NotFound"
    )


def missing_key(
    refs: Iterable[Reference], kind: str, name: str | None, key: str, said: Said
) -> Blocker:
    mine = [r for r in refs if r.kind == kind and (name is None or r.name == name) and r.key == key]
    if not mine:
        return said.blocker("", camel(kind) + "KeyNotFound")
    return said.blocker(mine[0].field, mine[0].stem + "KeyNotFound")


def camel(kind: str) -> str:
    return {SECRET: "Secret", CONFIGMAP: "ConfigMap", CLAIM: "PersistentVolumeClaim"}.get(
        kind, kind.capitalize()
    )


def newly_blocked(old_message: str, now: Sequence[Blocker]) -> list[Blocker]:
    """The causes in `now` that the previous status message did not mention: one Warning Event
    each, not one per resync while they last."""
    return [b for b in distinct(now) if b.summary not in old_message]
