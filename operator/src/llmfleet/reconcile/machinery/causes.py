"""Why a child pod cannot run, in the words of the scheduler or the kubelet, attributed to the spec
field that named the missing object: pure functions from pods (and, for volumes, the kubelet's
FailedMount Events) to `Blocker`s.

What each says, and where it says it:

* the scheduler, in the pod's `PodScheduled=False` condition: `persistentvolumeclaim "NAME" not
  found`, or every node `didn't match Pod's node affinity/selector` (no node carries the GPU);
* the kubelet, in `containerStatuses[].state.waiting`: `CreateContainerConfigError` with
  `secret "NAME" not found`, `configmap "NAME" not found` or `couldn't find key KEY in Secret
  NS/NAME` (an env var from a Secret or ConfigMap), `ErrImagePull` / `ImagePullBackOff`;
* the kubelet, only in an Event `FailedMount` while the container stays `ContainerCreating`:
  `MountVolume.SetUp failed for volume "VOL" : configmap "NAME" not found` (a volume from a
  ConfigMap or Secret).

The pod's status is in the operator's view already; only the last needs an Event read, and only
for a pod that is still ContainerCreating (`mount_pending`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# What a reference points at, as the scheduler and the kubelet name the kind.
SECRET = "secret"
CONFIGMAP = "configmap"
CLAIM = "persistentvolumeclaim"
NODES = "nodes"  # a nodeSelector (the GPU product) that no node may match
IMAGE = "image"  # a container's image, matched by container name

_NOT_FOUND = re.compile(r'\b(secret|configmap|persistentvolumeclaim) "([^"]+)" not found')
_NO_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) [^/\s]+/(\S+)")
_MOUNT = re.compile(r'MountVolume\.SetUp failed for volume "[^"]+" : (.*)$')
_MOUNT_NO_KEY = re.compile(r"configmap references non-existent config key: (\S+)")
_NODES_SAID = re.compile(r"0/(\d+) nodes are available: (.*)$")
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
# Reasons a node fails that say nothing about whether it carries the GPU asked for.
_NOT_ABOUT_THE_GPU = ("had untolerated taint", "were unschedulable", SELECTOR_MISMATCH)
IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
MOUNT_EVENT = "FailedMount"


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


def _missing(refs: Iterable[Reference], kind: str, name: str, said: Said) -> Blocker:
    mine = [r for r in refs if r.kind == kind and r.name == name]
    if not mine:
        return said.blocker("", _camel(kind) + "NotFound")
    # One object may be named by two fields (the same claim as input and output).
    return said.blocker(
        " and ".join(dict.fromkeys(r.field for r in mine)), mine[0].stem + "NotFound"
    )


def _missing_key(
    refs: Iterable[Reference], kind: str, name: str | None, key: str, said: Said
) -> Blocker:
    mine = [r for r in refs if r.kind == kind and (name is None or r.name == name) and r.key == key]
    if not mine:
        return said.blocker("", _camel(kind) + "KeyNotFound")
    return said.blocker(mine[0].field, mine[0].stem + "KeyNotFound")


def _camel(kind: str) -> str:
    return {SECRET: "Secret", CONFIGMAP: "ConfigMap", CLAIM: "PersistentVolumeClaim"}.get(
        kind, kind.capitalize()
    )


def _unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for c in status.get("conditions") or []:
        scheduled = c.get("type") == "PodScheduled" and c.get("status") == "False"
        if scheduled and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return None


def only_selector_mismatch(message: str) -> bool:
    """Whether the scheduler found no node matching the pod's nodeSelector among those it may
    use: every node either does not match or is tainted / cordoned, and at least one does not
    match. (A node that matches but is full says `Insufficient ...` instead.)"""
    head = message.split(" preemption:", 1)[0].strip().rstrip(".")
    found = _NODES_SAID.match(head)
    if found is None or SELECTOR_MISMATCH not in head:
        return False
    counted = 0
    for part in re.split(r", (?=\d+ )", found.group(2)):
        count, _, said = part.partition(" ")
        if not count.isdigit() or not any(ok in said for ok in _NOT_ABOUT_THE_GPU):
            return False
        counted += int(count)
    return counted == int(found.group(1))


def _scheduler(pod: Mapping[str, Any], refs: Sequence[Reference]) -> list[Blocker]:
    message = _unschedulable_message(pod)
    if message is None:
        return []
    name, by = pod["metadata"]["name"], "scheduler: FailedScheduling"
    found = _NOT_FOUND.search(message)
    if found is not None and found.group(1) == CLAIM:
        return [_missing(refs, CLAIM, found.group(2), Said(found.group(0), by, name))]
    if only_selector_mismatch(message):
        for r in refs:
            if r.kind == NODES:
                said = Said(f"no node carries {r.name} ({SELECTOR_MISMATCH})", by, name)
                return [said.blocker(r.field, r.stem + "NotFound")]
    return []


def _kubelet(pod: Mapping[str, Any], refs: Sequence[Reference]) -> list[Blocker]:
    status = pod.get("status") or {}
    name = pod["metadata"]["name"]
    out = []
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for cs in containers:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason, message = str(waiting.get("reason") or ""), str(waiting.get("message") or "")
        by = f"kubelet: {reason}"
        if reason == "CreateContainerConfigError":
            if found := _NOT_FOUND.search(message):
                out.append(
                    _missing(refs, found.group(1), found.group(2), Said(found.group(0), by, name))
                )
            elif no_key := _NO_KEY.search(message):
                key, kind, obj = no_key.groups()
                out.append(
                    _missing_key(refs, kind.lower(), obj, key, Said(no_key.group(0), by, name))
                )
            else:
                out.append(Said(message[:300], by, name).blocker("", reason))
        elif reason in IMAGE_ERRORS:
            image = str(cs.get("image") or "")
            said = Said(
                f'cannot pull image "{image}"' + (f": {message[:300]}" if message else ""), by, name
            )
            mine = [r for r in refs if r.kind == IMAGE and r.name == cs.get("name")]
            if mine:
                out.append(said.blocker(mine[0].field, mine[0].stem + "PullFailed"))
            else:
                out.append(said.blocker("", "ImagePullFailed"))
    return out


def mount_pending(pod: Mapping[str, Any]) -> bool:
    """Whether `pod` is on a node and waits for its volumes: the only state in which the
    kubelet's FailedMount Events say more than the pod itself."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or not (pod.get("spec") or {}).get("nodeName"):
        return False
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all(
        ((cs.get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating"
        for cs in statuses
    )


def _mounts(
    pod: Mapping[str, Any], refs: Sequence[Reference], said: Iterable[str]
) -> list[Blocker]:
    name, by = pod["metadata"]["name"], f"kubelet: {MOUNT_EVENT}"
    out = []
    for text in said:
        mount = _MOUNT.search(text)
        if mount is None:
            continue
        if found := _NOT_FOUND.search(mount.group(1)):
            out.append(
                _missing(refs, found.group(1), found.group(2), Said(found.group(0), by, name))
            )
        elif no_key := _MOUNT_NO_KEY.search(mount.group(1)):
            out.append(
                _missing_key(
                    refs, CONFIGMAP, None, no_key.group(1), Said(no_key.group(0), by, name)
                )
            )
    # The kubelet says it again on every retry: once is enough.
    return distinct(out)


def blockers(
    pods: Iterable[Mapping[str, Any]],
    refs: Sequence[Reference],
    mount_events: Mapping[str, Sequence[str]] | None = None,
) -> list[Blocker]:
    """Why each of `pods` cannot run, attributed to `refs`; `mount_events` are the FailedMount
    messages of the pods waiting for volumes, by pod name. Sorted by field, then pod."""
    found: list[Blocker] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        found += _scheduler(pod, refs) or _kubelet(pod, refs)
        if mount_events and mount_pending(pod):
            found += _mounts(pod, refs, mount_events.get(pod["metadata"]["name"], ()))
    return sorted(found, key=lambda b: (b.field == "", b.field, b.cause, b.pod))


def newly_blocked(old_message: str, now: Sequence[Blocker]) -> list[Blocker]:
    """The causes in `now` that the previous status message did not mention: one Warning Event
    each, not one per resync while they last."""
    return [b for b in distinct(now) if b.summary not in old_message]
