"""One writer: of two operator replicas (both the chart's ServiceAccount, each with a token of its
own, told apart in the audit log) only the holder of the leader Lease writes; when it is
SIGKILLed the standby takes the Lease, reconciles what changed meanwhile, and the children end as
rendered, nothing twice and nothing orphaned. And the election itself against the API server:
contention, hand-over on release, a leader whose Lease is taken stops."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from localcluster.failover import kill_leader, lease_holder, writers
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL
from llmfleet.reconcile.leader import LeaderElectionConfig, LeaderElector

from .harness import Operator, utcnow, wait_until
from .test_resilience import TINY, children, rendered

pytestmark = pytest.mark.cluster

FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}


class Candidate:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.lost = threading.Event()
        cfg = LeaderElectionConfig(namespace=namespace, name="test", identity=name, **FAST)
        self.elector = LeaderElector(api, cfg, on_lost=self.lost.set)


@pytest.fixture
def candidates(api: client.ApiClient, namespace: str) -> Iterator[list[Candidate]]:
    made = [Candidate(api, namespace, f"c{i}-{uuid.uuid4().hex[:6]}") for i in range(3)]
    yield made
    for c in made:
        c.elector.release()


def test_of_three_candidates_one_leads_and_a_release_hands_over_at_once(
    candidates: list[Candidate],
) -> None:
    for c in candidates:
        c.elector.start()
    wait_until(lambda: any(c.elector.leading for c in candidates), timeout=10, what="a leader")
    time.sleep(2 * FAST["lease_duration"])  # the others keep seeing a renewed Lease
    (leader,) = [c for c in candidates if c.elector.leading]
    others = [c for c in candidates if c is not leader]
    assert all(o.elector.holder == leader.elector.cfg.identity for o in others)

    leader.elector.release()
    # No lease duration to wait out: the next try of a standby takes it.
    wait_until(
        lambda: any(o.elector.leading for o in others), timeout=2.5, what="hand-over on release"
    )
    assert sum(o.elector.leading for o in others) == 1
    assert not leader.lost.is_set()


def test_a_leader_whose_lease_is_taken_gives_up_within_the_renew_deadline(
    candidates: list[Candidate], api: client.ApiClient, namespace: str
) -> None:
    leader = candidates[0]
    leader.elector.start()
    wait_until(lambda: leader.elector.leading, timeout=10, what="a leader")
    leases = client.CoordinationV1Api(api)
    lease = leases.read_namespaced_lease("test", namespace)
    lease.spec.holder_identity = "someone-else"
    lease.spec.lease_duration_seconds = 60
    leases.replace_namespaced_lease("test", namespace, lease)
    assert leader.lost.wait(FAST["renew_deadline"] + 2 * FAST["retry_period"] + 1)
    assert not leader.elector.leading
    # It wrote nothing after giving up: the Lease is still the other holder's.
    assert leases.read_namespaced_lease("test", namespace).spec.holder_identity == "someone-else"
    assert leader.elector.healthy() == (False, "leader election stopped")


def test_two_replicas_one_writer_and_a_killed_leader_is_replaced(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    standby = operator.replica("operator-b")
    custom = client.CustomObjectsApi(api)
    try:
        since = utcnow()
        standby.start(wait_leading=False)
        code, text = standby.health()
        assert code == 200, text
        assert "standing by" in text, text
        assert operator.leading()
        assert not standby.leading()
        assert lease_holder(operator).startswith(os.uname().nodename)

        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "ha"}}
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, {**body, "spec": TINY}
        )
        uid = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ha")[
            "metadata"
        ]["uid"]
        want = sorted(rendered("ha", namespace, uid))
        wait_until(lambda: live(api, namespace) == want, timeout=60, what="ha reconciled")
        time.sleep(3)  # a few of the standby's Lease reads and the leader's renewals
        both = writers(operator.writes_since(since, leases=True), operator, standby)
        assert both[standby.name] == [], "the standby wrote while the leader ran"
        assert set(both) == {operator.name, standby.name}
        assert any("llmdeployments" in w for w in both[operator.name])
        assert any(w.startswith("update leases/") for w in both[operator.name])

        def during_failover() -> None:
            # Changes nobody reconciles until the standby leads: a spec change and a lost child.
            spec = {**TINY, "engine": {**TINY["engine"], "maxModelLen": 256}}  # type: ignore[dict-item]
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "ha", {"spec": spec}
            )
            client.CoreV1Api(api).delete_namespaced_service("ha", namespace)

        failover = kill_leader(operator, standby, during_failover, first_write_in=namespace)
        assert 0 < failover.lease_taken_s <= failover.first_write_s

        def caught_up() -> bool:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ha")
            generation = (obj.get("status") or {}).get("observedGeneration")
            return generation == 2 and live(api, namespace) == want

        wait_until(caught_up, timeout=60, what="the standby reconciling the change")
        (engine,) = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
        assert "256" in " ".join(engine.spec.template.spec.containers[0].args or [])
        # Nothing twice, nothing orphaned: every child owned by ha, exactly what it renders.
        assert all(
            [r["uid"] for r in c["metadata"]["ownerReferences"]] == [uid]
            for c in children(api, namespace)
        )
    finally:
        # The standby hands the Lease back (SIGTERM), so the session's operator leads at once.
        standby.stop()
        operator.start()


def live(api: client.ApiClient, namespace: str) -> list[str]:
    return sorted(f"{c['kind']}/{c['metadata']['name']}" for c in children(api, namespace))
