"""Leader election on a `coordination.k8s.io` Lease, as client-go's `leaderelection` does it, so
that of several operator replicas exactly one writes.

A candidate reads the Lease every `retry_period`. It may take it when nobody holds it, or when the
holder's record has not changed for `lease_duration` as measured on the candidate's own clock
(never the holder's `renewTime`: clocks of two nodes disagree). Every write carries the
resourceVersion it read, so of two candidates that see an expired Lease at once only one wins.
The leader renews every `retry_period`; once no renewal has succeeded for `renew_deadline` it has
lost the Lease and must stop writing before anyone else may start: `lease_duration` later.

That is enforced by the clock, not by this thread noticing (its own call may hang): each renewal
moves the write gate's deadline (`writegate.py`) to `renew_deadline` after the renewal *began*,
and a write that would start later is refused. A standby can have seen that renewal no earlier
than it began, so it takes over `lease_duration` after it at the soonest; every write is given
at most `call_timeout` (the retry period, as the Lease's own calls), and `renew_deadline +
call_timeout < lease_duration`, so the last write has ended before then. A renewal that succeeds
only after the deadline does not count (client-go cancels it with its context): the Lease is lost.
A watchdog thread calls `on_lost` at the deadline itself, while the campaign may still hang.

Losing the Lease ends the process (`on_lost`), as controller-runtime's managers do: half-stopped
writers are harder to reason about than a restart into standby. A leader that shuts down on
purpose releases the Lease, so the standby takes over at its next try instead of a full
`lease_duration` later (a rolling upgrade's hand-over).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from llmfleet.metrics import LEADER, LEADER_TRANSITIONS

from .writegate import WriteGate

log = logging.getLogger(__name__)

# client-go waits retry_period * (1 + rand * JITTER) between tries, so candidates do not march
# in step.
JITTER = 1.2
# Reads and writes a release tries when the Lease changed between them (409).
RELEASE_TRIES = 3


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the Lease lives and how long a silent leader keeps it (the chart's leaderElection
    values: lease duration, renew deadline, retry period)."""

    namespace: str
    name: str
    identity: str
    # client-go's (and controller-runtime's) defaults.
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not (
            self.lease_duration > self.renew_deadline + self.call_timeout
            and self.renew_deadline > self.retry_period * JITTER
        ):
            raise ValueError(
                "leader election needs lease duration > renew deadline + retry period (one API "
                f"call's timeout) and renew deadline > {JITTER} x retry period; got "
                f"{self.lease_duration:g} s, {self.renew_deadline:g} s, {self.retry_period:g} s"
            )

    @property
    def call_timeout(self) -> float:
        """The longest one call to the API server may take, the Lease's and every write's."""
        return self.retry_period

    def shutdown_seconds(self, drain: float) -> float:
        """The longest a stopping leader takes to hand the Lease over: `drain` for its loops, one
        call for the writes in flight, then the release (the renewal under way, at most two
        calls, then a read and a write). The chart's terminationGracePeriodSeconds covers it."""
        return drain + self.call_timeout + (2 * self.retry_period + 1) + 2 * self.call_timeout


def default_identity(pod_name: str) -> str:
    """The pod's name plus a random suffix: a restarted container never mistakes the Lease its
    previous incarnation held for its own (client-go uses hostname_uuid the same way)."""
    return f"{pod_name or 'llmfleet'}_{uuid.uuid4()}"


def _now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns on a thread of its own; `wait_leading` blocks until this replica leads."""

    def __init__(
        self,
        api: k8s.ApiClient,
        cfg: LeaderElectionConfig,
        on_lost: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        gate: WriteGate | None = None,
    ) -> None:
        """`api` must not be the writers' gated client: the Lease's calls pass no gate."""
        self.cfg = cfg
        self._leases = k8s.CoordinationV1Api(api)
        self._on_lost = on_lost
        self._clock = clock
        self.gate = gate or WriteGate(call_timeout=cfg.call_timeout, clock=clock)
        self._leading = threading.Event()
        self._stop = threading.Event()
        # What this replica last saw of the Lease and when, on its own clock.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.holder = ""
        self._thread = threading.Thread(target=self._run, name="llmfleet-leader", daemon=True)
        # Gives the Lease up at the deadline itself, while the campaign may hang in a call:
        # `on_lost` then ends kopf too (which writes nothing: its handlers only enqueue).
        self._watchdog = threading.Thread(
            target=self._watch, name="llmfleet-leader-deadline", daemon=True
        )
        self._lost_once = threading.Lock()
        self._lost = False

    # --- public ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def wait_leading(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def healthy(self) -> tuple[bool, str]:
        """For /healthz: the campaign's thread runs and, while leading, renewals succeed."""
        # Lost at the deadline: the watchdog gave up while the campaign's call may still hang.
        if self._lost or (not self._thread.is_alive() and not self._stop.is_set()):
            return False, "leader election stopped"
        if self.leading:
            since = self._clock() - self._last_renew
            if since > self.cfg.renew_deadline:
                return False, f"no Lease renewal for {since:.0f} s"
            return True, f"leading (Lease {self.cfg.namespace}/{self.cfg.name})"
        return True, f"standing by (Lease {self.cfg.namespace}/{self.cfg.name} held by " + (
            f"{self.holder})" if self.holder else "nobody)"
        )

    def release(self) -> None:
        """Stop campaigning; if leading, hand the Lease over at once (call after every writer
        has stopped)."""
        self._stop.set()
        self.gate.close()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            # A renewal in flight would change the Lease between the release's read and write
            # (409, and no hand-over until the Lease expires): let it end first.
            self._thread.join(timeout=2 * self.cfg.retry_period + 1)
        if not self._leading.is_set():
            return
        self._leading.clear()
        LEADER.set(0)
        for attempt in range(1, RELEASE_TRIES + 1):
            try:
                self._hand_over()
                return
            except ApiException as e:
                if e.status == 409 and attempt < RELEASE_TRIES:
                    continue  # written meanwhile: read it again, it may still be ours
                failure: Exception = e
            except Exception as e:
                failure = e
            # Shutting down anyway: the Lease then expires on its own.
            log.warning(
                "could not release Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, failure
            )
            return

    def _hand_over(self) -> None:
        """client-go's release: no holder and a 1 s duration, so a standby takes it at once."""
        lease = self._leases.read_namespaced_lease(
            self.cfg.name, self.cfg.namespace, _request_timeout=self.cfg.retry_period
        )
        if lease.spec.holder_identity != self.cfg.identity:
            return
        lease.spec.holder_identity = None
        lease.spec.lease_duration_seconds = 1
        lease.spec.renew_time = _now()
        self._leases.replace_namespaced_lease(
            self.cfg.name, self.cfg.namespace, lease, _request_timeout=self.cfg.retry_period
        )
        log.info("released Lease %s/%s", self.cfg.namespace, self.cfg.name)

    # --- the campaign ----------------------------------------------------------------------

    def _run(self) -> None:
        cfg = self.cfg
        log.info("campaigning for Lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        while not self._stop.is_set():
            began = self._clock()
            won = self._try()
            if self._lost:  # given up meanwhile, at the deadline
                return
            if self._leading.is_set() and self._clock() >= self._last_renew + cfg.renew_deadline:
                self._lose()
                return
            if won:
                self._last_renew = began
                self.gate.open_until(began + cfg.renew_deadline)
                if not self._leading.is_set():
                    log.info("leading: acquired Lease %s/%s", cfg.namespace, cfg.name)
                    LEADER.set(1)
                    LEADER_TRANSITIONS.inc()
                    self._leading.set()
            pause = self.cfg.retry_period
            if not self._leading.is_set():
                pause *= 1 + random.random() * (JITTER - 1)
            self._stop.wait(pause)

    def _watch(self) -> None:
        # Its own deadline, not the gate's: shutting the gate for a shutdown loses nothing.
        while not self._stop.is_set():
            pause = self.cfg.retry_period
            if self._leading.is_set():
                left = self._last_renew + self.cfg.renew_deadline - self._clock()
                if left <= 0:
                    self._lose()
                    return
                pause = min(pause, max(left, 0.005))
            self._stop.wait(pause)

    def _lose(self) -> None:
        with self._lost_once:
            if self._lost or self._stop.is_set():
                return
            self._lost = True
        # The gate shut itself at the deadline already; closing it keeps it shut.
        self.gate.close()
        LEADER.set(0)
        log.error(
            "lost Lease %s/%s: no renewal for %.1f s (renew deadline %g s)",
            self.cfg.namespace,
            self.cfg.name,
            self._clock() - self._last_renew,
            self.cfg.renew_deadline,
        )
        self._leading.clear()
        self._on_lost()

    def _try(self) -> bool:
        """One read and, where this replica may hold the Lease, one write. True if it holds it."""
        timeout = self.cfg.retry_period
        try:
            lease = self._leases.read_namespaced_lease(
                self.cfg.name, self.cfg.namespace, _request_timeout=timeout
            )
        except ApiException as e:
            if e.status != 404:
                log.warning("cannot read Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, e)
                return False
            return self._create(timeout)
        except Exception as e:  # network: the next try will tell
            log.warning("cannot read Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, e)
            return False
        spec = lease.spec or k8s.V1LeaseSpec()
        record = (spec.holder_identity, spec.renew_time, lease.metadata.resource_version)
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.holder = spec.holder_identity or ""
        mine = spec.holder_identity == self.cfg.identity
        duration = spec.lease_duration_seconds or self.cfg.lease_duration
        if spec.holder_identity and not mine and now - self._observed_at < duration:
            return False
        stamp = _now()
        lease.spec = k8s.V1LeaseSpec(
            holder_identity=self.cfg.identity,
            lease_duration_seconds=round(self.cfg.lease_duration),
            acquire_time=spec.acquire_time if mine else stamp,
            renew_time=stamp,
            lease_transitions=(spec.lease_transitions or 0) + (0 if mine else 1),
        )
        try:
            self._leases.replace_namespaced_lease(
                self.cfg.name, self.cfg.namespace, lease, _request_timeout=timeout
            )
        except Exception as e:  # 409: another candidate wrote first
            if not (isinstance(e, ApiException) and e.status == 409):
                log.warning("cannot update Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, e)
            return False
        self.holder = self.cfg.identity
        return True

    def _create(self, timeout: float) -> bool:
        stamp = _now()
        body = k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(
                name=self.cfg.name,
                namespace=self.cfg.namespace,
                labels={"app.kubernetes.io/part-of": "llmfleet"},
            ),
            spec=k8s.V1LeaseSpec(
                holder_identity=self.cfg.identity,
                lease_duration_seconds=round(self.cfg.lease_duration),
                acquire_time=stamp,
                renew_time=stamp,
                lease_transitions=0,
            ),
        )
        try:
            self._leases.create_namespaced_lease(self.cfg.namespace, body, _request_timeout=timeout)
        except Exception as e:  # 409: another candidate created it first
            if not (isinstance(e, ApiException) and e.status == 409):
                log.warning("cannot create Lease %s/%s: %s", self.cfg.namespace, self.cfg.name, e)
            return False
        self.holder = self.cfg.identity
        return True
