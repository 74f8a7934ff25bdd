"""What test_why_pods_cannot_run.py's tables are made of: a row (a careless manifest, the
reason and the field status must name, Kubernetes' words, and the step that fixes it), the steps
that create what a row lacks, and the waits that apply a table at once and read what status and
the Warning Events said of each row."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes import client
from localcluster.nodes import Pool
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION

from .harness import TEST_NAMESPACE_LABEL, bound_claim, condition, wait_until

PLURALS = {"LLMDeployment": "llmdeployments", "LLMBatchJob": "llmbatchjobs"}


@dataclass(frozen=True)
class World:
    api: client.ApiClient
    cluster: Cluster
    namespace: str

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


Step = Callable[[World, str], None]  # given the world and the row's resource name


def secret(name: str, key: str) -> Step:
    def create(w: World, _: str) -> None:
        w.core.create_namespaced_secret(
            w.namespace, {"metadata": {"name": name}, "stringData": {key: "s3cret"}}
        )

    return create


def configmap(name: str, key: str) -> Step:
    line = {"custom_id": "1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}

    def create(w: World, _: str) -> None:
        w.core.create_namespaced_config_map(
            w.namespace, {"metadata": {"name": name}, "data": {key: json.dumps(line) + "\n"}}
        )

    return create


def claim(name: str) -> Step:
    """A claim bound to a PersistentVolume of its own (kwok mounts nothing)."""

    def create(w: World, _: str) -> None:
        bound_claim(w.core, w.namespace, name, f"/nonexistent/{w.namespace}-{name}")

    return create


def unbound_claim(name: str) -> Step:
    """A claim that nothing binds: no volume names it and no provisioner runs here."""

    def create(w: World, _: str) -> None:
        spec = {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        }
        w.core.create_namespaced_persistent_volume_claim(
            w.namespace, {"metadata": {"name": name}, "spec": spec}
        )

    return create


def volume_for(name: str) -> Step:
    """A PersistentVolume for the unbound claim `name`: the volume controller binds them."""

    def create(w: World, _: str) -> None:
        spec = {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": f"/nonexistent/{w.namespace}-{name}"},
            "claimRef": {"namespace": w.namespace, "name": name},
        }
        labels = {TEST_NAMESPACE_LABEL: w.namespace}
        w.core.create_persistent_volume(
            {"metadata": {"name": f"{w.namespace}-{name}", "labels": labels}, "spec": spec}
        )

    return create


def gpu_node(pool: str, product: str) -> Step:
    def create(w: World, _: str) -> None:
        w.cluster.apply_nodes([Pool(name=pool, count=1, gpus=8, product=product)])

    return create


def delete_node(pool: str) -> Step:
    return lambda w, _: w.core.delete_node(f"kwok-{pool}-0")


def engine(**fields: Any) -> Step:
    """Corrects the LLMDeployment's spec.engine: the operator rolls a new pod template."""

    def fix(w: World, name: str) -> None:
        patch = json.dumps({"spec": {"engine": fields}})
        w.cluster.kubectl("patch", "llmd", name, "-n", w.namespace, "--type=merge", "-p", patch)

    return fix


@dataclass(frozen=True)
class Row:
    body: dict[str, Any]
    reason: str  # of Available (LLMDeployment) or Running (LLMBatchJob), and of the Event
    field: str
    said: str  # what status quotes after the field, as Kubernetes said it
    fix: Step | None  # removes the cause; None: only a new resource would (an immutable spec)
    present: tuple[Step, ...] = ()  # what exists from the start
    undo: Step | None = None  # what `fix` made outside the namespace
    edits: int = 0  # edits of the resource that `fix` makes (a corrected field)

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def cause(self) -> str:
        return f"{self.field}: {self.said}"


@dataclass
class Outcome:
    """What one row's resource did: when status named the cause, and when it recovered."""

    said_after: float | None = None
    said: dict[str, Any] = field(default_factory=dict)  # the condition then
    event: str = ""  # the Warning Event's message then
    shown: str = ""  # `kubectl get` then
    recovered_after: float | None = None
    after: dict[str, Any] = field(default_factory=dict)  # the resource once the cause left
    warnings: int = 0  # Warning Events of the row's reason at the end
    last_seen: dict[str, Any] = field(default_factory=dict)  # the condition when last asked


def get(w: World, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(w.api).get_namespaced_custom_object(
        GROUP, VERSION, w.namespace, PLURALS[kind], name
    )
    return obj


def warnings(w: World) -> dict[tuple[str, str, str], list[str]]:
    """The namespace's Warning Events: (kind, name, reason) -> messages."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for e in w.core.list_namespaced_event(w.namespace).items:
        if e.type == "Warning":
            key = (e.involved_object.kind, e.involved_object.name, e.reason)
            out.setdefault(key, []).append(e.message)
    return out


def said_now(
    w: World,
    name: str,
    row: Row,
    events: dict[tuple[str, str, str], list[str]],
    seen: Outcome | None = None,
) -> tuple[dict[str, Any], str] | None:
    """The condition and the Event naming the row's cause, once status and an Event both do;
    `seen` keeps the condition as it was, for a row that never gets there."""
    ctype = "Available" if row.kind == "LLMDeployment" else "Running"
    cond = condition(get(w, row.kind, name), ctype)
    if seen is not None:
        seen.last_seen = cond
    if cond.get("status") != "False" or cond.get("reason") != row.reason:
        return None
    messages = events.get((row.kind, name, row.reason), [])
    return (cond, messages[0]) if messages else None


def recovered(obj: dict[str, Any], row: Row) -> bool:
    if row.kind == "LLMDeployment":
        return condition(obj, "Available").get("status") == "True"
    # kwok ends a Job's pod as soon as it runs: Complete, or Running on the way.
    return (obj.get("status") or {}).get("phase") in ("Running", "Complete")


def cause_gone(obj: dict[str, Any], row: Row) -> bool:
    return row.cause not in json.dumps((obj.get("status") or {}).get("conditions") or [])


def wait_all(
    what: str,
    timeout: float,
    names: Iterable[str],
    step: Callable[[str], bool],
    each_round: Callable[[], None] = lambda: None,
) -> None:
    """Asks `step(name)` of every row not done yet, every half second (after `each_round()`),
    until each said yes or `timeout` passed; the rows left never did (their tests fail)."""
    deadline = time.monotonic() + timeout
    left = list(names)
    while left and time.monotonic() < deadline:
        each_round()
        for name in list(left):
            if step(name):
                left.remove(name)
        time.sleep(0.5)
    if left:
        print(f"{what}: not within {timeout:.0f} s: {sorted(left)}")


def claims_bound(w: World, within: float) -> None:
    """Waits until every claim made for a volume of its own (`claim`) is Bound: a row's pod must
    find what exists from the start as it will stay, not a claim the volume controller has yet to
    bind (the scheduler would say it is unbound, and try the pod again only minutes later)."""

    def unbound() -> list[str]:
        claims = w.core.list_namespaced_persistent_volume_claim(w.namespace).items
        return [c.metadata.name for c in claims if c.spec.volume_name and c.status.phase != "Bound"]

    try:
        wait_until(lambda: not unbound(), within, 0.5)
    except AssertionError:
        raise AssertionError(f"claims not Bound within {within:.0f} s: {unbound()}") from None


def apply_until_named(
    w: World,
    rows: Mapping[str, Row],
    names: Mapping[str, str],
    outcomes: Mapping[str, Outcome],
    within: float,
    also: Callable[[str], bool] = lambda _: True,
) -> None:
    """Applies every row's resource at once (row `r` named `names[r]`), then notes in
    `outcomes[r]` when its status and a Warning Event both name its cause, and what they said;
    `also(r)` is asked then too, for what else the row must show first (it notes that itself).
    Rows not named within `within` s keep only the condition last seen."""
    docs = [
        {**row.body, "metadata": {**(row.body.get("metadata") or {}), "name": names[r]}}
        for r, row in rows.items()
    ]
    started = time.monotonic()
    w.cluster.kubectl("apply", "-n", w.namespace, "-f", "-", input=yaml.safe_dump_all(docs))
    events: dict[tuple[str, str, str], list[str]] = {}

    def read_events() -> None:
        events.clear()
        events.update(warnings(w))

    def named(r: str) -> bool:
        said = said_now(w, names[r], rows[r], events, outcomes[r])
        if said is None or not also(r):
            return False
        outcomes[r].said_after = time.monotonic() - started
        outcomes[r].said, outcomes[r].event = said
        return True

    wait_all("named", within, rows, named, read_events)
