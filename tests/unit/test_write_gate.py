"""One writer at a time: a leader whose Lease calls hang stops writing, by the clock, before a
standby may take the Lease over; and a write it is refused never reaches the API server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client as k8s

from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, LeaderElector
from llmfleet.reconcile.machinery.writegate import GatedApiClient, NotLeadingError, WriteGate

ME = "op-0_a"
# Short, so the test runs in about a second; the relations are the chart's (15/10/2).
CFG = LeaderElectionConfig(
    namespace="ns", name="lease", identity=ME, lease_duration=3.0, renew_deadline=1.0,
    retry_period=0.2,
)  # fmt: skip


class HangingLeases:
    """The Lease API: answers until `hang` is set, then every call blocks (a partitioned API
    server) until `release` is, and fails, or with `late_success` goes through late. Records when
    each renewal was stored, on the monotonic clock."""

    def __init__(self) -> None:
        self.spec: k8s.V1LeaseSpec | None = None
        self.version = 0
        self.stored_at: list[float] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.late_success = False
        self.calls_hanging = 0

    def _maybe_hang(self) -> None:
        if self.hang.is_set():
            self.calls_hanging += 1
            self.release.wait(30)
            self.calls_hanging -= 1
            if not self.late_success:
                raise TimeoutError("the API server did not answer")

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> k8s.V1Lease:
        self._maybe_hang()
        if self.spec is None:
            raise k8s.ApiException(status=404, reason="Not Found")
        meta = k8s.V1ObjectMeta(resource_version=str(self.version))
        return k8s.V1Lease(metadata=meta, spec=self.spec)

    def create_namespaced_lease(self, namespace: str, body: k8s.V1Lease, **_: Any) -> None:
        self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self._store(body)

    def _store(self, body: k8s.V1Lease) -> None:
        self._maybe_hang()
        self.spec, self.version = body.spec, self.version + 1
        self.stored_at.append(time.monotonic())


class FakeRest:
    """Stands in for the HTTP layer: what reached the API server, with the timeout it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def __getattr__(self, method: str) -> Any:
        def send(url: str, **kwargs: Any) -> str:
            self.sent.append((method, kwargs.get("_request_timeout")))
            return "stored"

        return send


def gated(gate: WriteGate) -> tuple[GatedApiClient, FakeRest]:
    conf = k8s.Configuration()
    conf.host = "http://127.0.0.1:9"
    api = GatedApiClient(conf, gate)
    rest = FakeRest()
    api.rest_client = rest
    return api, rest


def test_a_leader_whose_lease_calls_hang_stops_writing_before_a_standby_may_take_over() -> None:
    leases = HangingLeases()
    lost = threading.Event()
    elector = LeaderElector(k8s.ApiClient(), CFG, on_lost=lost.set)
    elector._leases = leases  # type: ignore[assignment]
    api, rest = gated(elector.gate)
    elector.start()
    try:
        assert elector.wait_leading(5)
        api.request("PATCH", "/apis/x/status", body={})  # leading: written
        leases.hang.set()
        shut_by = time.monotonic() + CFG.renew_deadline + 1
        while elector.gate.is_open():
            assert time.monotonic() < shut_by, "the gate stayed open while the renewal hung"
            time.sleep(0.01)
        refused_at = time.monotonic()
        with pytest.raises(NotLeadingError):
            api.request("PATCH", "/apis/x/status", body={})
        # The renewal is still stuck in its call: the gate shut, and the leader gave the Lease up
        # (on_lost ends the process), by the clock alone.
        assert leases.calls_hanging == 1
        assert lost.wait(1)
        # A standby sees the last stored renewal no earlier than it was stored, and may take the
        # Lease lease_duration after that; by then the last admitted write has timed out.
        standby_may_take_over = leases.stored_at[-1] + CFG.lease_duration
        assert refused_at + CFG.call_timeout < standby_may_take_over
        assert rest.sent == [("PATCH", CFG.call_timeout)]
    finally:
        leases.release.set()
        elector.release()


def test_a_renewal_that_succeeds_after_the_deadline_loses_the_lease() -> None:
    leases = HangingLeases()
    lost = threading.Event()
    elector = LeaderElector(k8s.ApiClient(), CFG, on_lost=lost.set)
    elector._leases = leases  # type: ignore[assignment]
    elector.start()
    try:
        assert elector.wait_leading(5)
        renewals = len(leases.stored_at)
        leases.hang.set()
        assert lost.wait(CFG.renew_deadline + 1)
        leases.late_success = True
        leases.hang.clear()
        leases.release.set()  # the hung renewal goes through, past its deadline
        deadline = time.monotonic() + 5
        while len(leases.stored_at) == renewals and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        assert len(leases.stored_at) == renewals + 1
        assert not elector.gate.is_open()
        assert not elector.leading
    finally:
        elector.release()


def test_shutting_the_gate_for_a_shutdown_keeps_the_lease_until_it_is_handed_over() -> None:
    leases = HangingLeases()
    lost = threading.Event()
    elector = LeaderElector(k8s.ApiClient(), CFG, on_lost=lost.set)
    elector._leases = leases  # type: ignore[assignment]
    elector.start()
    assert elector.wait_leading(5)
    elector.gate.close()  # the manager's stop, before the release
    time.sleep(CFG.renew_deadline + 0.2)
    assert not lost.is_set()
    elector.release()
    assert leases.spec is not None
    assert leases.spec.holder_identity is None


TIMEOUTS = {
    "none-asked: the gate's": (None, 2.0),
    "longer-asked: the gate's": (30, 2.0),
    "shorter-asked: kept": (0.5, 0.5),
}


@pytest.mark.parametrize(("asked", "sent"), TIMEOUTS.values(), ids=TIMEOUTS.keys())
def test_every_write_is_bounded_by_the_call_timeout(asked: float | None, sent: float) -> None:
    api, rest = gated(WriteGate(time.monotonic() + 60, call_timeout=2.0))
    api.request("POST", "/api/v1/namespaces/n/events", body={}, _request_timeout=asked)
    assert rest.sent == [("POST", sent)]


def test_reads_pass_a_shut_gate() -> None:
    gate = WriteGate(call_timeout=2.0)
    api, rest = gated(gate)
    gate.close()
    api.request("GET", "/api/v1/pods")
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(NotLeadingError, match=method):
            api.request(method, "/api/v1/pods")
    assert rest.sent == [("GET", None)]


def test_a_gate_once_shut_is_not_reopened_by_a_late_renewal() -> None:
    gate = WriteGate(time.monotonic() + 60, call_timeout=2.0)
    gate.close()
    gate.open_until(time.monotonic() + 60)
    assert not gate.is_open()
