"""What a kubelet checks before it starts a pod's containers, and what it says when it refuses:
the Secrets and ConfigMaps the pod's volumes and environment name must exist (with the keys
named). Both of the lab's nodes use it: the node runner (`local-gpu-0`) and the kwok gate (kwok's
nodes), so that a pod whose Secret is missing waits there as it would on a real node, and starts
once the object exists.

The kubelet's words, from pkg/kubelet (kubelet_pods.go, volume/configmap, volume/secret):

* a volume from a missing ConfigMap or Secret: the container stays `ContainerCreating` (no
  message) and an Event `FailedMount`: `MountVolume.SetUp failed for volume "VOL" : configmap
  "NAME" not found` (or `secret "NAME" not found`; a missing item: `configmap references
  non-existent config key: KEY`);
* an env var from a missing ConfigMap or Secret: waiting reason `CreateContainerConfigError` with
  the message `secret "NAME" not found`, `configmap "NAME" not found`, `couldn't find key KEY in
  Secret NS/NAME` (or `in ConfigMap NS/NAME`), and an Event `Failed`: `Error: <the message>`.

A container's image comes between the two: `check` takes the node's pull decisions (imagepull.py,
the images an air-gapped node holds) and asks them before the container's environment; after the
environment, whether the runtime can start the container's command (containerstart.py).

A missing PersistentVolumeClaim never reaches a node: the scheduler holds the pod
(`persistentvolumeclaim "NAME" not found`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

SECRET, CONFIGMAP = "secret", "configmap"
# kind ("secret", "configmap"), namespace, name -> the object's keys, None when it does not exist.
Lookup = Callable[[str, str, str], Collection[str] | None]


@dataclass(frozen=True)
class Note:
    """An Event the kubelet posts on the way to a refusal (`Pulling`, then `Failed` to pull)."""

    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Exit:
    """How a container's last instance ended (its lastState, or its state once the pod ended)."""

    code: int
    reason: str
    message: str


@dataclass(frozen=True)
class Refusal:
    """Why a kubelet does not start a container (yet)."""

    container: str | None  # None: the pod's volumes
    waiting_reason: str
    waiting_message: str
    event_reason: str
    event_message: str
    earlier: tuple[Note, ...] = ()  # posted before the Warning above, in this order
    restarts: int = 0  # instances of the container that started and ended before this one
    exited: Exit | None = None  # the last instance's end, once one was created
    ended: bool = False  # restartPolicy Never: the pod is over (phase Failed)


# pod, container -> why the kubelet would not start the container: for its image (imagepull.py),
# or because the runtime cannot run its command (containerstart.py).
ImageCheck = Callable[[Mapping[str, Any], Mapping[str, Any]], Refusal | None]


def api_lookup(core: client.CoreV1Api) -> Lookup:
    """A Lookup that reads the API server (the node's own credentials, as a kubelet's)."""

    def keys(kind: str, namespace: str, name: str) -> set[str] | None:
        read = core.read_namespaced_secret if kind == SECRET else core.read_namespaced_config_map
        try:
            obj = read(name, namespace, _request_timeout=10)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return set(obj.data or {}) | set(getattr(obj, "binary_data", None) or {})

    return keys


def _mount(volume: str, detail: str) -> Refusal:
    said = f'MountVolume.SetUp failed for volume "{volume}" : {detail}'
    return Refusal(None, "ContainerCreating", "", "FailedMount", said)


def _config(container: str, message: str) -> Refusal:
    return Refusal(container, "CreateContainerConfigError", message, "Failed", f"Error: {message}")


def _volumes(pod: Mapping[str, Any], lookup: Lookup) -> Refusal | None:
    ns = pod["metadata"]["namespace"]
    for volume in pod["spec"].get("volumes") or []:
        for kind, field, name_key in (
            (CONFIGMAP, "configMap", "name"),
            (SECRET, "secret", "secretName"),
        ):
            source = volume.get(field)
            if source is None or source.get("optional"):
                continue
            keys = lookup(kind, ns, str(source[name_key]))
            if keys is None:
                return _mount(volume["name"], f'{kind} "{source[name_key]}" not found')
            for item in source.get("items") or []:
                if item["key"] not in keys:
                    what = "config" if kind == CONFIGMAP else "secret"
                    detail = f"{kind} references non-existent {what} key: {item['key']}"
                    return _mount(volume["name"], detail)
    return None


def _env(ns: str, container: Mapping[str, Any], lookup: Lookup) -> Refusal | None:
    name = str(container["name"])
    for source in container.get("envFrom") or []:
        for kind, field in ((CONFIGMAP, "configMapRef"), (SECRET, "secretRef")):
            ref = source.get(field)
            needed = ref is not None and not ref.get("optional")
            if needed and lookup(kind, ns, str(ref["name"])) is None:
                return _config(name, f'{kind} "{ref["name"]}" not found')
    for env in container.get("env") or []:
        value_from = env.get("valueFrom") or {}
        for kind, field, title in (
            (SECRET, "secretKeyRef", "Secret"),
            (CONFIGMAP, "configMapKeyRef", "ConfigMap"),
        ):
            ref = value_from.get(field)
            if ref is None or ref.get("optional"):
                continue
            keys = lookup(kind, ns, str(ref["name"]))
            if keys is None:
                return _config(name, f'{kind} "{ref["name"]}" not found')
            if ref["key"] not in keys:
                return _config(
                    name, f"couldn't find key {ref['key']} in {title} {ns}/{ref['name']}"
                )
    return None


def check(
    pod: Mapping[str, Any],
    lookup: Lookup,
    containers: Iterable[str] | None = None,
    images: ImageCheck | None = None,
    start: ImageCheck | None = None,
) -> Refusal | None:
    """Why the kubelet would not start `pod` now, or None: its volumes first, as it mounts them
    before it starts any container; then, container by container, the image (`images`, which
    may pull) before the environment, as it pulls before it builds a container's config, and
    the start (`start`) last. `containers`: only those (default: all)."""
    refused = _volumes(pod, lookup)
    if refused is not None:
        return refused
    wanted = None if containers is None else set(containers)
    spec = pod["spec"]
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if wanted is None or container["name"] in wanted:
            if images is not None and (refused := images(pod, container)) is not None:
                return refused
            refused = _env(pod["metadata"]["namespace"], container, lookup)
            if refused is not None:
                return refused
            if start is not None and (refused := start(pod, container)) is not None:
                return refused
    return None


def events(pod: Mapping[str, Any], refusal: Refusal, node: str) -> list[dict[str, Any]]:
    """The Events a kubelet posts on `pod` for `refusal`, in order: the earlier ones (a pull's
    `Pulling`), then the Warning."""
    notes = [*refusal.earlier, Note("Warning", refusal.event_reason, refusal.event_message)]
    return [_event(pod, refusal.container, n, node) for n in notes]


def event(pod: Mapping[str, Any], refusal: Refusal, node: str) -> dict[str, Any]:
    """The Warning Event a kubelet posts on `pod` for `refusal`."""
    return events(pod, refusal, node)[-1]


def note_event(
    pod: Mapping[str, Any], container: str | None, note: Note, node: str
) -> dict[str, Any]:
    """`note` as the Event a kubelet posts on `pod` (about `container`, if one)."""
    return _event(pod, container, note, node)


def _event(pod: Mapping[str, Any], container: str | None, note: Note, node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
    }
    if container is not None:
        involved["fieldPath"] = f"spec.containers{{{container}}}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
            "namespace": meta["namespace"],
        },
        "involvedObject": involved,
        "type": note.type,
        "reason": note.reason,
        "message": note.message,
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def waiting_status(pod: Mapping[str, Any], refusal: Refusal) -> dict[str, Any]:
    """The pod status a kubelet writes while it refuses: Pending, every container waiting (the
    refused one with the reason, the others ContainerCreating), not ready; once a refused start
    ended a pod of restartPolicy Never, Failed with that container terminated."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    containers = pod["spec"].get("containers") or []
    names = [str(c["name"]) for c in containers]

    def ended(e: Exit) -> dict[str, Any]:
        return {"exitCode": e.code, "reason": e.reason, "message": e.message, "finishedAt": now}

    def state(name: str) -> dict[str, Any]:
        if refusal.container == name and refusal.ended and refusal.exited is not None:
            return {"terminated": ended(refusal.exited)}
        if refusal.container == name and refusal.waiting_message:
            return {
                "waiting": {"reason": refusal.waiting_reason, "message": refusal.waiting_message}
            }
        why = refusal.waiting_reason if refusal.container == name else "ContainerCreating"
        return {"waiting": {"reason": why}}

    def last(name: str) -> dict[str, Any]:
        if refusal.container != name or refusal.ended or refusal.exited is None:
            return {}
        return {"lastState": {"terminated": ended(refusal.exited)}}

    def restarts(name: str) -> int:
        return refusal.restarts if refusal.container == name else 0

    def cond(kind: str, ok: bool, **why: str) -> dict[str, Any]:
        return {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now, **why}

    unready = {
        "reason": "ContainersNotReady",
        "message": f"containers with unready status: [{' '.join(names)}]",
    }
    return {
        "phase": "Failed" if refusal.ended else "Pending",
        "conditions": [
            # The sandbox waits for the volumes; an env var is looked up once it exists.
            cond("PodReadyToStartContainers", refusal.container is not None),
            cond("Initialized", True),
            cond("Ready", False, **unready),
            cond("ContainersReady", False, **unready),
            cond("PodScheduled", True),
        ],
        "containerStatuses": [
            {
                "name": str(c["name"]),
                "image": str(c.get("image", "")),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": restarts(str(c["name"])),
                "state": state(str(c["name"])),
                **last(str(c["name"])),
            }
            for c in containers
        ],
    }
