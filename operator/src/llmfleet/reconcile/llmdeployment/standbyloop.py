"""The standby engines' loop (spec.autoscaling.standby; docs/autoscaling.md, "Standby engines"):
on each reconcile, put a standby engine that has just started to sleep, read the queue of the
engines in rotation, and wake or sleep one standby engine as `standby.decide` says. Each engine
is called through podcall with the standby token (llmfleet.devfence lets nothing else through);
its readiness gate (render.standby.STANDBY_GATE) keeps it out of rotation while asleep.

The calls run in the background (machinery/backgroundcalls.py: a 72B fp8 takes a minute to fall
asleep, and a reconcile must not hold a queue worker that long): a reconcile starts one and
returns; its end enqueues the LLMDeployment, and the next reconcile turns the gate, emits the
Event, or, when the engine did not answer as vLLM does, says so (a Warning Event) and leaves the
engine's gate as it was, to be called again once the pod's backoff has passed.

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
from llmfleet.reconcile.machinery.backgroundcalls import (
    BackgroundCalls,
    Caller,
    Calls,
    Outcome,
    Request,
)
from llmfleet.render.names import Owner
from llmfleet.render.standby import STANDBY_GATE, STANDBY_LABEL, standby_name

from . import reasons as r
from .fetcher_token import FetcherTokens
from .kvcache import Scraper, scrape, scrape_all
from .standby import StandbyDecision, StandbyState, decide

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
# The standby gate's reasons. FALLING_ASLEEP: out of rotation, its sleep sent or owed (it failed),
# kept in the pod so that a new leader sends it again.
ASLEEP, WOKEN, FALLING_ASLEEP = "Asleep", "Woken", "FallingAsleep"

# (pod, gate status, reason)
GateSetter = Callable[[str, bool, str], None]


def post(
    url: str, timeout: float, headers: Mapping[str, str], abort: podcall.Abort
) -> tuple[int, str]:
    return podcall.call(url, {}, timeout, headers, abort=abort)


@dataclass(frozen=True)
class StandbyReport:
    asleep: int
    awake: int
    woken: tuple[str, ...] = ()
    slept: tuple[str, ...] = ()
    # A standby engine that did not answer its call as vLLM does: pod -> why
    failed: Mapping[str, str] | None = None
    # Standby engines with a sleep or wake call in flight
    calling: tuple[str, ...] = ()


class _Step:
    """What one step saw and did: gates turned, calls started, engines counted by gate."""

    def __init__(self, headers: Mapping[str, str], set_gate: GateSetter) -> None:
        self.headers = headers
        self._set_gate = set_gate
        self.written: dict[str, tuple[str, str]] = {}  # pod -> the gate's status and reason
        self.counts = {"True": 0, "False": 0}
        self.awake: list[dict[str, Any]] = []  # candidates to sleep: no call in flight
        self.asleep: list[dict[str, Any]] = []  # candidates to wake
        self.woken: list[str] = []
        self.slept: list[str] = []
        self.started: list[str] = []
        self.waking = False  # an engine woken whose queue is not counted yet (not Ready)
        self.failed: dict[str, str] = {}

    def ended(
        self, pod: str, outcome: Outcome, gate: str | None, reason: str
    ) -> tuple[str | None, str]:
        """Act on the end of `pod`'s call: its gate and reason after it."""
        if outcome.error is not None:
            self.failed[pod] = outcome.error
            return gate, reason
        if outcome.path == WAKE_UP:
            self.set_gate(pod, True, WOKEN)
            self.woken.append(pod)
            return "True", WOKEN
        self.set_gate(pod, False, ASLEEP)
        if outcome.path == SLEEP_AGAIN:
            self.slept.append(pod)
        return "False", ASLEEP

    def set_gate(self, pod: str, awake: bool, reason: str) -> None:
        self._set_gate(pod, awake, reason)
        self.written[pod] = ("True" if awake else "False", reason)


def _gate(pod: dict[str, Any]) -> tuple[str | None, str]:
    """The standby gate's status (None: never set) and reason."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == STANDBY_GATE:
            return str(c.get("status")), str(c.get("reason") or "")
    return None, ""


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
    """Per LLMDeployment, since when its queue has stayed low, which are due a look, and the
    sleep and wake calls in flight (`calls`: each on a thread of its own, as a 72B fp8 takes a
    minute to fall asleep; its end enqueues the LLMDeployment, whose next reconcile acts on it)."""

    def __init__(
        self,
        port: int,
        scraper: Scraper = scrape,
        caller: Caller = post,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._port = port
        self._scraper = scraper
        self._clock = clock
        self.calls = BackgroundCalls(caller)
        self._lock = threading.Lock()
        self._low_since: dict[tuple[str, str], float | None] = {}
        self._due: dict[tuple[str, str], float] = {}
        # The gates this watch turned that the view may not show yet, per LLMDeployment and pod:
        # a reconcile that ran before the view heard of one must not send its call again.
        self._written: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}

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
            written = dict(self._written.get(key, {}))
        standby = {str(p["metadata"]["name"]) for p in pods if is_standby(p)}
        self.calls.keep_only(key, standby)
        calls = self.calls.snapshot(key)
        step = _Step({"Authorization": f"Bearer {token}"}, set_gate)
        step.written.update((pod, gate) for pod, gate in written.items() if pod in standby)
        for pod in standby_engines(pods):
            self._look_at(key, pod, calls, step)
        ips = [str(p["status"]["podIP"]) for p in in_rotation(pods)]
        queue = waiting_per_pod(scrape_all(self._scraper, ips, self._port))
        if step.waking or WAKE_UP in calls.in_flight.values():
            # One wake at a time: the next once the queue counts the engine woken last.
            decision = StandbyDecision(None, low_since)
        else:
            state = StandbyState(len(step.asleep), len(step.awake), low_since)
            decision = decide(plan, state, queue, now)
        if decision.action == "wake":
            self._start(key, step.asleep[0], WAKE_UP, WAKE_TIMEOUT_SECONDS, step)
        elif decision.action == "sleep":
            pod = step.awake[-1]
            # Out of rotation before it sleeps, and its gate's reason says it owes a sleep.
            step.set_gate(pod["metadata"]["name"], False, FALLING_ASLEEP)
            step.counts["True"] -= 1
            step.counts["False"] += 1
            self._start(key, pod, SLEEP_AGAIN, SLEEP_TIMEOUT_SECONDS, step)
        with self._lock:
            self._low_since[key] = decision.low_since
            self._written[key] = step.written
        return StandbyReport(
            asleep=step.counts["False"],
            awake=step.counts["True"],
            woken=tuple(step.woken),
            slept=tuple(step.slept),
            failed=step.failed or None,
            calling=tuple(sorted(set(calls.in_flight) | set(step.started))),
        )

    def _look_at(
        self, key: tuple[str, str], pod: dict[str, Any], calls: Calls, step: _Step
    ) -> None:
        """Act on the end of `pod`'s call, count it, and start the sleep it owes or list it as a
        candidate for the decision."""
        name = str(pod["metadata"]["name"])
        gate, reason = _gate(pod)
        if step.written.get(name, (gate, reason)) == (gate, reason):
            step.written.pop(name, None)  # the view has caught up
        else:
            gate, reason = step.written[name]
        ended = calls.ended.get(name)
        if ended is not None:
            gate, reason = step.ended(name, ended, gate, reason)
            self.calls.settle(key, name)
        if gate is not None:
            step.counts[gate] += 1
        if name in calls.in_flight or self.calls.backing_off(key[0], name):
            return
        if gate is None:  # just started: awake, out of rotation
            self._start(key, pod, SLEEP_AFTER_START, SLEEP_TIMEOUT_SECONDS, step)
        elif gate == "False" and reason == FALLING_ASLEEP:  # its sleep failed: again
            self._start(key, pod, SLEEP_AGAIN, SLEEP_TIMEOUT_SECONDS, step)
        elif gate == "True":
            step.awake.append(pod)
            step.waking |= _condition(pod, "Ready") != "True"
        else:
            step.asleep.append(pod)

    def _start(
        self, key: tuple[str, str], pod: dict[str, Any], path: str, timeout: float, step: _Step
    ) -> None:
        name = str(pod["metadata"]["name"])
        url = podcall.pod_url(str(pod["status"]["podIP"]), self._port, path)
        if url is None:
            step.failed[name] = "no IP address"
        elif self.calls.start(key, Request(name, url, path, timeout, step.headers)):
            step.started.append(name)

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
            self._written.pop((namespace, name), None)
        self.calls.forget((namespace, name))


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
        emit(
            body,
            "Warning",
            r.STANDBY_CALL_FAILED_EVENT,
            f"standby engine pod {pod}: {why}; its gate is unchanged, and it is called again "
            "after a backoff while still needed",
        )
    m.set_standby(
        ns,
        name,
        asleep=report.asleep,
        awake=report.awake,
        woken=len(report.woken),
        slept=len(report.slept),
    )
    return StandbyStatus(asleep=report.asleep, awake=report.awake)
