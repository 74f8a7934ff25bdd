"""A leader's release hands the Lease over at once, even when the Lease changed under it: a
renewal still in flight, or another write between the release's read and its write (409)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from llmfleet.reconcile.machinery.leader import RELEASE_TRIES, LeaderElectionConfig, LeaderElector

ME = "op-0_a"
CFG = LeaderElectionConfig(
    namespace="ns", name="lease", identity=ME, lease_duration=3, renew_deadline=2, retry_period=0.2
)


class Leases:
    """The Lease API, with the API server's optimistic concurrency (a write of a stale
    resourceVersion gets 409); also `conflicts` writes refused as if another writer came first,
    and, while `hold` is clear, writes that wait for it (a renewal in flight)."""

    def __init__(self, conflicts: int = 0) -> None:
        self.spec = k8s.V1LeaseSpec(holder_identity=ME, lease_duration_seconds=3)
        self.version = 1
        self.conflicts = conflicts
        self.writes: list[str | None] = []
        self.hold = threading.Event()
        self.hold.set()
        self.writing = threading.Event()
        self.lock = threading.Lock()

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> k8s.V1Lease:
        with self.lock:
            spec = k8s.V1LeaseSpec(**{k: getattr(self.spec, k) for k in self.spec.attribute_map})
            meta = k8s.V1ObjectMeta(resource_version=str(self.version))
        return k8s.V1Lease(metadata=meta, spec=spec)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self.writing.set()
        self.hold.wait(5)
        with self.lock:
            if self.conflicts or body.metadata.resource_version != str(self.version):
                self.conflicts = max(0, self.conflicts - 1)
                self.version += 1
                raise ApiException(status=409, reason="Conflict")
            self.spec, self.version = body.spec, self.version + 1
            self.writes.append(body.spec.holder_identity)


def leading(leases: Leases) -> LeaderElector:
    elector = LeaderElector(k8s.ApiClient(), CFG, on_lost=lambda: None)
    elector._leases = leases  # type: ignore[assignment]
    # As a renewal leaves it: leading, renewed just now.
    elector._last_renew = time.monotonic()
    elector.gate.open_until(elector._last_renew + CFG.renew_deadline)
    elector._leading.set()
    return elector


@pytest.mark.parametrize(
    ("conflicts", "handed_over"),
    [
        (0, True),
        (1, True),  # written meanwhile: read again, still ours, released
        (RELEASE_TRIES - 1, True),
        (RELEASE_TRIES, False),  # gives up, logs; the Lease then expires on its own
    ],
)
def test_a_release_that_meets_a_conflict_reads_the_lease_again_and_hands_it_over(
    conflicts: int, handed_over: bool
) -> None:
    leases = Leases(conflicts)
    elector = leading(leases)
    elector.release()  # never raises: the process is shutting down
    assert (leases.spec.holder_identity is None) is handed_over
    assert not elector.leading


def test_a_release_waits_for_the_renewal_in_flight_then_hands_the_lease_over() -> None:
    leases = Leases()
    elector = leading(leases)
    leases.hold.clear()
    elector.start()  # its first try renews: the write waits on `hold`
    assert leases.writing.wait(5)
    releasing = threading.Thread(target=elector.release)
    releasing.start()
    releasing.join(0.3)
    assert releasing.is_alive(), "the release did not wait for the renewal in flight"
    leases.hold.set()
    releasing.join(5)
    assert leases.writes == [ME, None]  # the renewal, then the release
    assert leases.spec.holder_identity is None
