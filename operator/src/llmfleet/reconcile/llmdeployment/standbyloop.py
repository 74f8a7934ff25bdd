"""The standby engines' loop (spec.autoscaling.standby; docs/autoscaling.md, "Standby engines"):
on each reconcile, put a standby engine that has just started to sleep, read the queue of the
engines in rotation, and wake or sleep one standby engine as `standby.decide` says. Each engine
is called through podcall with the standby token (llmfleet.devfence lets nothing else through);
its readiness gate (render.standby.STANDBY_GATE) keeps it out of rotation while asleep.

A sleeping vLLM holds requests instead of refusing them, so the gate goes False before an engine
is put to sleep and True only after it answered its wake-up."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from llmfleet import metrics as m
from llmfleet import metrics_reconcile
from llmfleet.models.standby import StandbyPlan, StandbyStatus
from llmfleet.reconcile.machinery import podcall
from llmfleet.render.names import Owner
from llmfleet.render.standby import STANDBY_GATE, STANDBY_LABEL, standby_name

from . import reasons as r
from .fetcher_token import FetcherTokens
from .kvcache import Scraper, scrape, scrape_all
from .standby import StandbyState, decide

log = logging.getLogger(__name__)

WAITING = "vllm:num_requests_waiting"
# vLLM 0.26 on an H200: an 8B slept in 10.3 s and woke in 0.69 s; a 72B fp8 slept in 57 s.
SLEEP_TIMEOUT_SECONDS = 120.0
WAKE_TIMEOUT_SECONDS = 30.0
# How often a fleet with standby engines is reconciled however quiet its children: the queue
# is read this often (the HPA's metrics pipeline reads it every 15-30 s).
POLL_SECONDS = 5.0
# A sleeping engine's requests in flight finish first when it goes back to sleep (vLLM's
# PauseMode "wait"); right after its start it has none.
SLEEP_AFTER_START = "/sleep?level=1"
SLEEP_AGAIN = "/sleep?level=1&mode=wait"
WAKE_UP = "/wake_up"

# (url, timeout, headers) -> (status, text): podcall.call's POST, without a body
Caller = Callable[[str, float, Mapping[str, str]], tuple[int, str]]
# (pod, gate status, reason)
GateSetter = Callable[[str, bool, str], None]


def post(url: str, timeout: float, headers: Mapping[str, str]) -> tuple[int, str]:
    return podcall.call(url, {}, timeout, headers)


@dataclass(frozen=True)
class StandbyReport:
    asleep: int
    awake: int
    woken: tuple[str, ...] = ()
    slept: tuple[str, ...] = ()
    # A standby engine that did not answer its call as vLLM does: pod -> why
    failed: Mapping[str, str] | None = None


def _condition(pod: dict[str, Any], kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def _live(pod: dict[str, Any]) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return not meta.get("deletionTimestamp") and bool(status.get("podIP"))


def is_standby(obj: dict[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(STANDBY_LABEL) == "true"


def standby_engines(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Standby pods whose vLLM answers (containers ready), by name."""
    out = [
        p for p in pods if is_standby(p) and _live(p) and _condition(p, "ContainersReady") == "True"
    ]
    return sorted(out, key=lambda p: str(p["metadata"]["name"]))


def in_rotation(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engines requests go to: Ready, standby engines that are awake included."""
    return [p for p in pods if _live(p) and _condition(p, "Ready") == "True"]


def waiting_per_pod(pages: list[str | None]) -> float | None:
    """The average of vllm:num_requests_waiting over the pages; None when there is none or one
    was not read (a guess must not wake or sleep an engine)."""
    if not pages or any(p is None for p in pages):
        return None
    total = 0.0
    for page in pages:
        assert page is not None
        for family in text_string_to_metric_families(page):
            if family.name == WAITING:
                total += sum(s.value for s in family.samples)
    return total / len(pages)


class StandbyWatch:
    """Per LLMDeployment, since when its queue has stayed low, and which are due a look."""

    def __init__(
        self,
        port: int,
        scraper: Scraper = scrape,
        caller: Caller = post,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._port = port
        self._scraper = scraper
        self._caller = caller
        self._clock = clock
        self._lock = threading.Lock()
        self._low_since: dict[tuple[str, str], float | None] = {}
        self._due: dict[tuple[str, str], float] = {}

    def step(
        self,
        namespace: str,
        name: str,
        plan: StandbyPlan,
        pods: Iterable[dict[str, Any]],
        *,
        token: str,
        set_gate: GateSetter,
    ) -> StandbyReport:
        key = (namespace, name)
        pods = list(pods)
        now = self._clock()
        with self._lock:
            self._due[key] = now + POLL_SECONDS
            low_since = self._low_since.get(key)
        headers = {"Authorization": f"Bearer {token}"}
        failed: dict[str, str] = {}
        awake, asleep, slept = [], [], []
        for pod in standby_engines(pods):
            gate = _condition(pod, STANDBY_GATE)
            if gate is None:  # just started: awake, out of rotation
                if self._call(pod, SLEEP_AFTER_START, SLEEP_TIMEOUT_SECONDS, headers, failed):
                    set_gate(pod["metadata"]["name"], False, "Asleep")
                    asleep.append(pod)
            elif gate == "True":
                awake.append(pod)
            else:
                asleep.append(pod)
        serving = in_rotation(pods)
        ips = [str(p["status"]["podIP"]) for p in serving]
        queue = waiting_per_pod(scrape_all(self._scraper, ips, self._port))
        state = StandbyState(asleep=len(asleep), awake=len(awake), low_since=low_since)
        decision = decide(plan, state, queue, now)
        woken = []
        if decision.action == "wake":
            pod = asleep[0]
            if self._call(pod, WAKE_UP, WAKE_TIMEOUT_SECONDS, headers, failed):
                set_gate(pod["metadata"]["name"], True, "Woken")
                woken.append(str(pod["metadata"]["name"]))
                asleep.remove(pod)
                awake.append(pod)
        elif decision.action == "sleep":
            pod = awake[-1]
            set_gate(pod["metadata"]["name"], False, "Asleep")
            if self._call(pod, SLEEP_AGAIN, SLEEP_TIMEOUT_SECONDS, headers, failed):
                slept.append(str(pod["metadata"]["name"]))
                awake.remove(pod)
                asleep.append(pod)
        with self._lock:
            self._low_since[key] = decision.low_since
        return StandbyReport(
            asleep=len(asleep),
            awake=len(awake),
            woken=tuple(woken),
            slept=tuple(slept),
            failed=failed or None,
        )

    def _call(
        self,
        pod: dict[str, Any],
        path: str,
        timeout: float,
        headers: Mapping[str, str],
        failed: dict[str, str],
    ) -> bool:
        name = str(pod["metadata"]["name"])
        url = podcall.pod_url(str(pod["status"]["podIP"]), self._port, path)
        if url is None:
            failed[name] = "no IP address"
            return False
        try:
            status, text = self._caller(url, timeout, headers)
        except podcall.PodCallError as e:
            failed[name] = str(e)
            return False
        if status != 200:
            failed[name] = f"POST {path} answered {status}: {text[:200]}"
            return False
        return True

    def due(self) -> list[tuple[str, str]]:
        """The LLMDeployments with standby engines whose queue is due a look."""
        now = self._clock()
        with self._lock:
            out = [k for k, at in self._due.items() if at <= now]
            for k in out:
                self._due[k] = now + POLL_SECONDS
        return sorted(out)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._low_since.pop((namespace, name), None)
            self._due.pop((namespace, name), None)


STANDBY_PURPOSE = "standby"  # the token's purpose (reconcile.llmdeployment.fetcher_token)
Emit = Callable[[dict[str, Any], str, str, str], None]


def ensure_token(tokens: FetcherTokens, owner: Owner) -> None:
    """The fence's token Secret, before the pods that read it (as the fetchers')."""
    tokens.ensure_secret(owner, STANDBY_PURPOSE, standby_name(owner.name))


def reconcile_standby(
    watch: StandbyWatch,
    core: k8s.CoreV1Api,
    emit: Emit,
    body: dict[str, Any],
    plan: StandbyPlan | None,
    *,
    pods: Iterable[dict[str, Any]],
    tokens: FetcherTokens,
) -> StandbyStatus | None:
    """One step of the LLMDeployment's standby engines: gates, calls, Events and metrics; what
    status.standby says (None without standby replicas)."""
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    if plan is None:
        watch.forget(ns, name)
        m.forget_standby(ns, name)
        return None

    def set_gate(pod: str, awake: bool, reason: str) -> None:
        gate = {"type": STANDBY_GATE, "status": "True" if awake else "False", "reason": reason}
        try:
            core.patch_namespaced_pod_status(pod, ns, {"status": {"conditions": [gate]}})
            metrics_reconcile.count_write("patch", "Pod/status")
        except ApiException as e:
            if e.status != 404:  # a pod that is gone needs no gate
                raise

    token = tokens.token(ns, name, STANDBY_PURPOSE).value
    report = watch.step(ns, name, plan, pods, token=token, set_gate=set_gate)
    for pod in report.woken:
        emit(
            body,
            "Normal",
            r.STANDBY_WOKEN_EVENT,
            f"standby engine pod {pod} woken and in rotation: more than "
            f"{plan.wake_queue_depth} requests waiting per engine",
        )
    for pod in report.slept:
        emit(
            body,
            "Normal",
            r.STANDBY_SLEPT_EVENT,
            f"standby engine pod {pod} out of rotation and asleep: at most "
            f"{plan.sleep_queue_depth} requests waiting per engine for {plan.cooldown_seconds} s",
        )
    for pod, why in sorted((report.failed or {}).items()):
        log.warning("standby engine pod %s/%s: %s", ns, pod, why)
    m.set_standby(
        ns,
        name,
        asleep=report.asleep,
        awake=report.awake,
        woken=len(report.woken),
        slept=len(report.slept),
    )
    return StandbyStatus(asleep=report.asleep, awake=report.awake)
