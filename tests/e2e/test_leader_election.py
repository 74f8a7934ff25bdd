"""One writer: of the chart's two operator pods (`replicas=2`; both the chart's ServiceAccount,
told apart in the audit log by the pod their token is bound to) only the holder of the leader
Lease writes; when its pod is killed the standby (or the pod that replaces it, whichever finds the
Lease expired first) takes the Lease, reconciles what changed meanwhile, and the children end as
rendered, nothing twice and nothing orphaned. A `kubectl rollout restart` while the leader's
reconcile waits on an adapter fetch (from a store that sends it a few bytes a second, to the
engine stand-in's pod, whose adapter fetcher really runs): the old leader writes nothing, of any
resource, once the next holder's first write of the Lease is in the audit log. And the election
itself against the API server: contention, hand-over on release, a leader whose Lease is taken
stops (the same with a Lease API that hangs: tests/unit/test_write_gate.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from localcluster.failover import stamp
from localcluster.metricsstack.load import delete_llmd, tiny_llmd
from localcluster.slowstore import SlowStore, slow_store
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL
from llmfleet.reconcile.machinery.leader import LeaderElectionConfig, LeaderElector

from . import localnode
from .fleetobjects import TINY, children, rendered
from .harness import Operator, apply_with_gpus, stand_in, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the lab's operator pods (two replicas, one killed) and its audit log"),
]

FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
# The audit log's user.extra key naming the pod a ServiceAccount token was bound to.
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


# What the manager logs when it shuts the write gate on a reconcile still under way at shutdown.
CUT_OFF = "reconciles still under way"


@pytest.fixture(scope="module")
def two_replicas(operator: Operator) -> Iterator[Operator]:
    """The chart's operator at `replicas=2` for the module's tests (one roll there, one back)."""
    with operator.configured("replicas=2"):
        yield operator


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    """`local-gpu-0`, for an engine pod whose adapter fetcher really runs."""
    with localnode.local_node(cluster, gpus=1) as node:
        yield node


@pytest.fixture
def slow() -> Iterator[SlowStore]:
    """An S3 API whose adapter takes minutes to send: a fetch of it stays in flight."""
    with slow_store() as store:
        yield store


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
    two_replicas: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    operator = two_replicas
    custom = client.CustomObjectsApi(api)
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
    uid = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ha")["metadata"][
        "uid"
    ]
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
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "ha", {"spec": spec})
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


def test_a_rollout_restart_mid_fetch_leaves_no_write_of_the_old_leader_after_the_new_takes_over(
    two_replicas: Operator,
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    node_runner: str,
    slow: SlowStore,
) -> None:
    operator = two_replicas
    core = client.CoreV1Api(api)
    operator.start()  # the roll is over (an earlier test's killed pod replaced), one pod leads
    # Keys for boto3 to sign with; the slow store takes any.
    keys = {"AWS_ACCESS_KEY_ID": "restart", "AWS_SECRET_ACCESS_KEY": "restart"}
    core.create_namespaced_secret(namespace, {"metadata": {"name": "slow"}, "stringData": keys})
    body = stand_in(tiny_llmd("restart"))
    body["spec"]["engine"]["lora"] = {
        "maxAdapters": 2,
        "maxRank": 16,
        "objectStore": {"endpoint": slow.endpoint, "secretRef": "slow"},
    }
    body["spec"]["adapters"] = [{"name": "slow", "source": slow.source}]
    apply_with_gpus(cluster, core, namespace, node_runner, 1, body)
    try:
        # The leader's reconcile asked the engine pod's fetcher for the adapter and waits on it.
        wait_until(slow.weights_in_flight, 120, 0.5, "the adapter's fetch in flight")
        old = operator.leader_pod()
        assert old is not None
        old_name = old["metadata"]["name"]
        restarted_at = utcnow()
        new = operator.restart()
        assert slow.weights_in_flight(), "the fetch ended before the hand-over: nothing was shown"
        assert slow.weights_begun() == 1, "the fetch was started again, not waited on"
        assert CUT_OFF in operator.log_of(old).read_text(errors="replace"), (
            f"{old_name} was not waiting on the fetch when it stopped"
        )

        events = operator.writes_since(restarted_at, leases=True)
        handovers = lease_handovers(events, operator.release, first=old_name)
        assert handovers, "the Lease never changed hands"
        assert handovers[0][0] == old_name
        assert new["metadata"]["name"] == handovers[-1][1]
        writes = by_pod(events)
        for before, after, took in handovers:
            late = [f"{t.isoformat()} {w}" for t, w in writes.get(before, []) if t >= took]
            assert late == [], f"{before} wrote after {after} took the Lease at {took}: {late}"
    finally:
        slow.stop()  # the fetch fails at once: the engine pod has nothing to wait for as it goes
        delete_llmd(api, namespace, "restart")


def lease_handovers(
    events: list[dict[str, Any]], lease: str, first: str
) -> list[tuple[str, str, datetime]]:
    """Each change of hands of the Lease `lease` among the audit `events`, whose holder was the
    pod `first`: (the pod before, the pod after, when the latter's first write of it was
    received), in order. Only writes the API server accepted count: a standby that tries to
    take a Lease still held is refused (409) and holds nothing."""
    accepted = sorted(
        (stamp(e), pod_of(e))
        for e in events
        if (e.get("objectRef") or {}).get("resource") == "leases"
        and (e.get("objectRef") or {}).get("name") == lease
        and 200 <= int((e.get("responseStatus") or {}).get("code") or 0) < 300
    )
    out: list[tuple[str, str, datetime]] = []
    holder = first
    for when, pod in accepted:
        if pod != holder:
            out.append((holder, pod, when))
            holder = pod
    return out


def by_pod(events: list[dict[str, Any]]) -> dict[str, list[tuple[datetime, str]]]:
    """Each operator pod's writes among `events`: (when, 'verb resource/name')."""
    out: dict[str, list[tuple[datetime, str]]] = {}
    for e in events:
        pod = pod_of(e)
        ref = e.get("objectRef") or {}
        what = f"{e['verb']} {ref.get('resource')}/{ref.get('name', '')}"
        out.setdefault(pod, []).append((stamp(e), what))
    return out


def pod_of(event: dict[str, Any]) -> str:
    """The operator pod an audit event's request came from ('?' for none)."""
    return str(((event["user"].get("extra") or {}).get(POD_NAME_EXTRA) or ["?"])[0])


def live(api: client.ApiClient, namespace: str) -> list[str]:
    return sorted(f"{c['kind']}/{c['metadata']['name']}" for c in children(api, namespace))
