"""Stalled engines, per LLMDeployment with spec.engine.stallDetection: each reconcile reads the
/metrics of its engines that carry the progress gate, judges them (`stall.py`), and says which
pods' gates to turn, which to restart and what status says. The poll that makes those reconciles
happen every third of a window, however quiet the children, is `due`'s caller (manager.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from llmfleet import metrics_reconcile
from llmfleet.render.names import PROGRESS_GATE

from .kvcache import Scraper, scrape, scrape_all
from .stall import Track, Verdict, judge, parse_sample

# Never poll faster than this, whatever the window: each poll is a reconcile.
MIN_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class StallReport:
    window: float
    stalled: tuple[str, ...] = ()  # pods out of service now
    newly_stalled: tuple[str, ...] = ()  # taken out by this check
    restart: tuple[str, ...] = ()  # stalled for a second window: to delete
    gates: Mapping[str, bool] = field(default_factory=dict)  # pod -> gate wanted, where it differs

    def degraded(self) -> str:
        """Degraded's message; "" when no engine is stalled."""
        if not self.stalled:
            return ""
        more = f" (and {len(self.stalled) - 1} more)" if len(self.stalled) > 1 else ""
        return (
            f"engine pod {self.stalled[0]}{more} has requests running and counted no token for "
            f"{self.window:.0f} s: out of service, restarted if still stalled {self.window:.0f} s "
            "later"
        )


def watched_engines(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods rendered with the progress gate whose containers are ready, with an IP, not being
    deleted: the ones that serve, or would but for the gate."""
    out = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        rendered = (pod.get("spec") or {}).get("readinessGates") or []
        gates = {g.get("conditionType") for g in rendered}
        if PROGRESS_GATE not in gates or meta.get("deletionTimestamp") or not status.get("podIP"):
            continue
        if _condition(pod, "ContainersReady") != "True":
            continue
        out.append(pod)
    return out


def opened(pods: Iterable[dict[str, Any]]) -> dict[str, bool]:
    """The gate each watched engine wants when no stall is watched for: open."""
    return {
        str(p["metadata"]["name"]): True
        for p in watched_engines(pods)
        if _condition(p, PROGRESS_GATE) != "True"
    }


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


class StallWatch:
    """Per LLMDeployment, what each engine last showed (by pod uid) and when it is due again."""

    def __init__(
        self, port: int, scraper: Scraper = scrape, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._port = port
        self._scraper = scraper
        self._clock = clock
        self._lock = threading.Lock()
        self._tracks: dict[tuple[str, str], dict[str, Track]] = {}
        self._due: dict[tuple[str, str], tuple[float, float]] = {}  # -> (next, interval)

    def check(
        self,
        namespace: str,
        name: str,
        pods: Iterable[dict[str, Any]],
        window: float,
        busy: frozenset[str] = frozenset(),
    ) -> StallReport:
        """Judge the watched engines among `pods`; `busy`: pods the operator sent a LoRA call
        to in this reconcile. Pods no longer watched are forgotten."""
        key = (namespace, name)
        engines = watched_engines(pods)
        now = self._clock()
        with self._lock:
            known = self._tracks.get(key, {})
            self._due[key] = (now + max(MIN_POLL_SECONDS, window / 3), window)
        pages = scrape_all(self._scraper, [str(p["status"]["podIP"]) for p in engines], self._port)
        tracks: dict[str, Track] = {}
        stalled, newly, restart, gates = [], [], [], {}
        for pod, page in zip(engines, pages, strict=True):
            pod_name, uid = str(pod["metadata"]["name"]), str(pod["metadata"]["uid"])
            sample = parse_sample(page) if page else None
            track, verdict = judge(known.get(uid), sample, now, window, busy=pod_name in busy)
            if track is not None:
                tracks[uid] = track
            out = verdict is not Verdict.SERVING
            if out:
                stalled.append(pod_name)
                if known.get(uid) is None or known[uid].out_since is None:
                    newly.append(pod_name)
            if verdict is Verdict.RESTART:
                restart.append(pod_name)
            if _condition(pod, PROGRESS_GATE) != ("False" if out else "True"):
                gates[pod_name] = not out
        with self._lock:
            self._tracks[key] = tracks
        return StallReport(
            window=window,
            stalled=tuple(sorted(stalled)),
            newly_stalled=tuple(sorted(newly)),
            restart=tuple(sorted(restart)),
            gates=gates,
        )

    def due(self) -> list[tuple[str, str]]:
        """The LLMDeployments whose engines are due for a look, each then due a third of its
        window later."""
        now = self._clock()
        with self._lock:
            out = [k for k, (at, _) in self._due.items() if at <= now]
            for k in out:
                window = self._due[k][1]
                self._due[k] = (now + max(MIN_POLL_SECONDS, window / 3), window)
        return sorted(out)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._tracks.pop((namespace, name), None)
            self._due.pop((namespace, name), None)


def turn_gates(core: k8s.CoreV1Api, namespace: str, report: StallReport) -> None:
    """Sets each pod's progress gate as `report` wants it; a pod that is gone needs none."""
    for pod, serving in sorted(report.gates.items()):
        gate = {
            "type": PROGRESS_GATE,
            "status": "True" if serving else "False",
            "reason": "TokensCounted" if serving else "EngineStalled",
        }
        patch = core.patch_namespaced_pod_status
        if _unless_gone(patch, pod, namespace, {"status": {"conditions": [gate]}}):
            metrics_reconcile.count_write("patch", "Pod/status")


def restart(core: k8s.CoreV1Api, namespace: str, pod: str) -> None:
    """Deletes the pod; its Deployment starts another."""
    if _unless_gone(core.delete_namespaced_pod, pod, namespace):
        metrics_reconcile.count_write("delete", "Pod")


def _unless_gone(call: Callable[..., object], *args: object) -> bool:
    """Whether `call(*args)` wrote; False when its pod is gone."""
    try:
        call(*args)
    except ApiException as e:
        if e.status != 404:
            raise
        return False
    return True
