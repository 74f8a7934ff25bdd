"""Why each child pod cannot run, for both kinds: one pure function, `blockers`, from the pods as
the API server holds them (and, for volumes, the Events written about them) to `Blocker`s that
name the spec field behind each cause, or quote Kubernetes where no field is.

Where each cause is said:

* the scheduler, in the pod's `PodScheduled=False` condition (its FailedScheduling Event says the
  same): a missing or unbound claim, no node with the GPU product, a GPU, cpu or memory
  shortage, taints no toleration matches, or anything else, quoted;
* the kubelet, in `containerStatuses[].state.waiting` and the pod's own reason: see
  container_blockers;
* the kubelet and the attach/detach controller, only in FailedMount / FailedAttachVolume Events
  while the container stays `ContainerCreating` (`mount_pending`): a volume's Secret, ConfigMap
  or claim, attributed through the pod's volumes to the field that named it.

The pod's status is in the operator's view already; only the last needs an Event read, and only
for a pod that is still ContainerCreating.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .causes import (
    ATTACH_EVENT,
    CLAIM,
    CONFIGMAP,
    INSUFFICIENT_GPUS,
    INSUFFICIENT_RESOURCES,
    MOUNT_EVENT,
    NODES,
    NOT_FOUND,
    RESOURCES,
    SECRET,
    TAINTS,
    UNSCHEDULABLE,
    UNTOLERATED_TAINT,
    VOLUME_NOT_BOUND,
    Blocker,
    Reference,
    Said,
    distinct,
    missing,
    missing_key,
)
from .container_blockers import kubelet_blockers
from .scheduler_words import (
    CORDONED,
    GPU_SHORTAGE,
    LIMIT,
    SELECTOR_MISMATCH,
    TAINTED,
    every_node_fails_for,
    only_selector_mismatch,
    shortages_in,
    stable_part,
    unschedulable_message,
)

_MOUNT = re.compile(r'MountVolume\.SetUp failed for volume "[^"]+" : (.*)$')
_MOUNT_NO_KEY = re.compile(r"configmap references non-existent config key: (\S+)")
_VOLUMES_NAMED = re.compile(r'volume "([^"]+)"|unmounted volumes=\[([^\]]*)\]')
# What the scheduler's volume binding says when the claim exists but no volume can be bound.
_UNBOUND = re.compile(
    r"unbound immediate PersistentVolumeClaims|didn't find available persistent volumes to bind"
    r"|volume node affinity conflict|bound to non-existent persistentvolume"
)
SCHEDULER = "scheduler: FailedScheduling"


def _claims_of(pod: Mapping[str, Any]) -> list[str]:
    volumes = (pod.get("spec") or {}).get("volumes") or []
    return [
        str(v["persistentVolumeClaim"]["claimName"])
        for v in volumes
        if (v.get("persistentVolumeClaim") or {}).get("claimName")
    ]


def _by_claim(refs: Sequence[Reference], claims: Iterable[str]) -> list[Reference]:
    names = set(claims)
    return [r for r in refs if r.kind == CLAIM and r.name in names]


def _scheduler(pod: Mapping[str, Any], refs: Sequence[Reference]) -> list[Blocker]:
    message = unschedulable_message(pod)
    if message is None:
        return []
    name = pod["metadata"]["name"]
    found = NOT_FOUND.search(message)
    if found is not None and found.group(1) == CLAIM:
        return [missing(refs, CLAIM, found.group(2), Said(found.group(0), SCHEDULER, name))]
    if only_selector_mismatch(message):
        for r in refs:
            if r.kind == NODES:
                said = Said(f"no node carries {r.name} ({SELECTOR_MISMATCH})", SCHEDULER, name)
                return [said.blocker(r.field, r.stem + "NotFound")]
    said = Said(stable_part(message) or UNSCHEDULABLE, SCHEDULER, name)
    shortages = shortages_in(message)
    if GPU_SHORTAGE in shortages:
        # Capacity, not a field: more GPUs than the cluster has free.
        return [said.blocker("", INSUFFICIENT_GPUS)]
    if any(s.startswith("Insufficient ") for s in shortages):
        containers = {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}
        field = next((r.field for r in refs if r.kind == RESOURCES and r.name in containers), "")
        return [said.blocker(field, INSUFFICIENT_RESOURCES)]
    if _UNBOUND.search(message):
        mine = _by_claim(refs, _claims_of(pod))
        if mine:
            fields = " and ".join(dict.fromkeys(r.field for r in mine))
            return [said.blocker(fields, mine[0].stem + "Unbound")]
        return [said.blocker("", VOLUME_NOT_BOUND)]
    if every_node_fails_for(message, (TAINTED, CORDONED), TAINTED):
        field = next((r.field for r in refs if r.kind == TAINTS), "")
        return [said.blocker(field, UNTOLERATED_TAINT)]
    return [said.blocker("", UNSCHEDULABLE)]


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


def _volume_object(pod: Mapping[str, Any], text: str) -> tuple[str, str] | None:
    """The Secret, ConfigMap or claim behind the first volume `text` names."""
    found = _VOLUMES_NAMED.search(text)
    if found is None:
        return None
    wanted = (found.group(1) or found.group(2) or "").split()
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if v.get("name") not in wanted:
            continue
        if claim := (v.get("persistentVolumeClaim") or {}).get("claimName"):
            return CLAIM, str(claim)
        if secret := (v.get("secret") or {}).get("secretName"):
            return SECRET, str(secret)
        if config := (v.get("configMap") or {}).get("name"):
            return CONFIGMAP, str(config)
    return None


def _volume(pod: Mapping[str, Any], refs: Sequence[Reference], text: str) -> Blocker:
    event = ATTACH_EVENT if text.startswith(("AttachVolume", "Multi-Attach")) else MOUNT_EVENT
    name, by = pod["metadata"]["name"], f"kubelet: {event}"
    mount = _MOUNT.search(text)
    inner = mount.group(1) if mount else text
    if found := NOT_FOUND.search(inner):
        return missing(refs, found.group(1), found.group(2), Said(found.group(0), by, name))
    if no_key := _MOUNT_NO_KEY.search(inner):
        return missing_key(refs, CONFIGMAP, None, no_key.group(1), Said(no_key.group(0), by, name))
    said = Said(text[:LIMIT], by, name)
    obj = _volume_object(pod, text)
    mine = [r for r in refs if obj is not None and (r.kind, r.name) == obj]
    if mine:
        return said.blocker(mine[0].field, f"{mine[0].stem}{event.removeprefix('Failed')}Failed")
    return said.blocker("", event)


def blockers(
    pods: Iterable[Mapping[str, Any]],
    refs: Sequence[Reference],
    volume_events: Mapping[str, Sequence[str]] | None = None,
) -> list[Blocker]:
    """Why each of `pods` cannot run, attributed to `refs`; `volume_events` are the newest
    FailedMount / FailedAttachVolume messages of the pods waiting for volumes, by pod name.
    Computed from the pods as they are now, so a cause that went is gone. Sorted by field,
    then cause, then pod; those without a field last."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    others_run = any((p.get("status") or {}).get("phase") == "Running" for p in live)
    found: list[Blocker] = []
    for pod in live:
        found += _scheduler(pod, refs) or kubelet_blockers(pod, refs, others_run)
        if volume_events and mount_pending(pod):
            said = volume_events.get(pod["metadata"]["name"], ())
            # The kubelet says it again on every retry: once is enough.
            found += distinct([_volume(pod, refs, text) for text in said])
    return sorted(found, key=lambda b: (b.field == "", b.field, b.cause, b.pod))
