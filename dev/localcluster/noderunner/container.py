"""One container of a pod on the local node, and the status a kubelet reports for it and its pod:
container statuses, conditions with their transition times, readiness gates."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .memlimit import limit_bytes
from .probes import ProbeState
from .volumes import PodVolumes

BACKOFF_START = 10.0  # the kubelet's crash-loop back-off: 10 s, doubling, at most 300 s


def timestamp(t: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(time.time() if t is None else t, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


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
    memory_limit: int | None = None  # resources.limits.memory in bytes (memlimit.py)
    next_memory_check: float = 0.0  # monotonic

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def __post_init__(self) -> None:
        self.memory_limit = limit_bytes(self.spec)
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            if self.spec.get(kind):
                self.probes[kind] = ProbeState(self.spec[kind])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def container_status(c: Container) -> dict[str, Any]:
    """containerStatuses[] for `c`, as the kubelet writes it."""
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


class Conditions:
    """Pod conditions, each stamped with the time its status last changed."""

    def __init__(self) -> None:
        self._since: dict[str, str] = {}

    def __call__(self, kind: str, ok: bool) -> dict[str, Any]:
        value = "True" if ok else "False"
        key = f"{kind}={value}"
        if key not in self._since:
            self._since = {k: v for k, v in self._since.items() if not k.startswith(kind + "=")}
            self._since[key] = timestamp()
        return {"type": kind, "status": value, "lastTransitionTime": self._since[key]}


def gates_pass(pod: Mapping[str, Any]) -> bool:
    gates = [str(g.get("conditionType")) for g in pod["spec"].get("readinessGates") or []]
    conditions = (pod.get("status") or {}).get("conditions") or []
    true = {str(c.get("type")) for c in conditions if c.get("status") == "True"}
    return all(g in true for g in gates)
