"""One writer: of the chart's two operator pods (`replicas=2`; both the chart's ServiceAccount,
told apart in the audit log by the pod their token is bound to) only the holder of the leader
Lease writes; when its pod is killed the standby (or the pod that replaces it, whichever finds the
Lease expired first) takes the Lease, reconciles what changed meanwhile, and the children end as
rendered, nothing twice and nothing orphaned. And the election itself against the API server:
contention, hand-over on release, a leader whose Lease is taken stops."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.failover import stamp
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL
from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, LeaderElector

from .fleetobjects import TINY, children, rendered
from .harness import Operator, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the lab's operator pods (two replicas, one killed) and its audit log"),
]

FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
# The audit log's user.extra key naming the pod a ServiceAccount token was bound to.
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


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

    def take() -> bool:
        # The leader renews every retry period: a renewal between the read and the replace is a
        # 409, and whoever takes a Lease reads it again and retries, as this does.
        lease = leases.read_namespaced_lease("test", namespace)
        lease.spec.holder_identity = "someone-else"
        lease.spec.lease_duration_seconds = 60
        try:
            leases.replace_namespaced_lease("test", namespace, lease)
        except ApiException as e:
            if e.status != 409:
                raise
            return False
        return True

    wait_until(take, timeout=10, interval=0.05, what="the Lease taken by someone else")
    assert leader.lost.wait(FAST["renew_deadline"] + 2 * FAST["retry_period"] + 1)
    assert not leader.elector.leading
    # It wrote nothing after giving up: the Lease is still the other holder's.
    assert leases.read_namespaced_lease("test", namespace).spec.holder_identity == "someone-else"
    assert leader.elector.healthy() == (False, "leader election stopped")


def test_two_replicas_one_writer_and_a_killed_leader_is_replaced(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api)
    with operator.configured("replicas=2"):
        leader = operator.leader_pod()
        assert leader is not None
        name = leader["metadata"]["name"]
        (standby,) = [p for p in operator.ready_pods() if p["metadata"]["name"] != name]
        other = standby["metadata"]["name"]
        since = utcnow()
        code, text = operator.health(standby)
        assert code == 200, text  # Ready: a standby is healthy
        assert "standing by" in text, text
        assert operator.leading(leader)
        assert not operator.leading(standby)

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
        both = by_pod(operator.writes_since(since, leases=True))
        assert both.get(other, []) == [], "the standby wrote while the leader ran"
        assert any("llmdeployments" in w for _, w in both[name])
        assert any(w.startswith("update leases/") for _, w in both[name])

        killed_at = utcnow()
        operator.kill(name)
        # Changes nobody reconciles until a new leader leads: a spec change and a lost child.
        spec = {**TINY, "engine": {**TINY["engine"], "maxModelLen": 256}}
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "ha", {"spec": spec}
        )
        client.CoreV1Api(api).delete_namespaced_service("ha", namespace)

        def since_kill(leases: bool) -> dict[str, datetime]:
            """Each operator pod's first write since the kill, of the Lease or of anything else."""
            firsts: dict[str, datetime] = {}
            for pod, writes in by_pod(operator.writes_since(killed_at, leases=True)).items():
                if pod == name:
                    continue  # a write of the killed leader's that raced the kill
                times = [t for t, w in writes if w.split(" ")[1].startswith("leases/") == leases]
                if times:
                    firsts[pod] = min(times)
            return firsts

        # The standby or the Deployment's replacement for the killed pod: whichever finds the
        # Lease expired first on its own clock (both count lease_duration from the last renewal
        # they saw) leads, and it alone writes.
        (successor, wrote), *others = wait_until(
            lambda: sorted(since_kill(leases=False).items()), 90, what="a new leader writing"
        )
        assert others == [], f"more than one replica wrote after the kill: {others}"
        taken = since_kill(leases=True).get(successor)
        assert taken is not None, f"{successor} writes without having taken the Lease"
        assert killed_at < taken <= wrote
        assert operator.lease_holder().startswith(f"{successor}_")

        def caught_up() -> bool:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ha")
            generation = (obj.get("status") or {}).get("observedGeneration")
            return generation == 2 and live(api, namespace) == want

        wait_until(caught_up, timeout=60, what="the new leader reconciling the change")
        assert list(since_kill(leases=False)) == [successor], "another replica wrote meanwhile"
        (engine,) = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
        assert "256" in " ".join(engine.spec.template.spec.containers[0].args or [])
        # Nothing twice, nothing orphaned: every child owned by ha, exactly what it renders.
        assert all(
            [r["uid"] for r in c["metadata"]["ownerReferences"]] == [uid]
            for c in children(api, namespace)
        )


def by_pod(events: list[dict[str, Any]]) -> dict[str, list[tuple[datetime, str]]]:
    """Each operator pod's writes among `events`: (when, 'verb resource/name')."""
    out: dict[str, list[tuple[datetime, str]]] = {}
    for e in events:
        pod = ((e["user"].get("extra") or {}).get(POD_NAME_EXTRA) or ["?"])[0]
        ref = e.get("objectRef") or {}
        what = f"{e['verb']} {ref.get('resource')}/{ref.get('name', '')}"
        out.setdefault(pod, []).append((stamp(e), what))
    return out


def live(api: client.ApiClient, namespace: str) -> list[str]:
    return sorted(f"{c['kind']}/{c['metadata']['name']}" for c in children(api, namespace))
