"""The operator through faults: an API server restart (its watches, kopf's and its view's, break
and requests fail; when the server is back every resource converges to exactly what it renders,
with nothing left over and nothing twice), server errors on every write (retried with a backoff
per resource, and shown in status once they repeat), and a lost node (its pods come back where
GPUs allow; status says ScalingLimited where they cannot)."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from localcluster.nodes import Pool
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import KIND, PLURAL
from llmfleet.render.names import DEPLOYMENT_LABEL

from .fleetobjects import TINY, children, rendered
from .harness import Operator, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the lab's API server (the test restarts it) and kwok's GPU nodes"),
]

COUNT = 20


def converged(api: client.ApiClient, namespace: str) -> str | None:
    """What is not yet as rendered, or None."""
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )["items"]
    owners = {o["metadata"]["uid"]: o for o in items}
    unreconciled = [
        o["metadata"]["name"]
        for o in items
        if (o.get("status") or {}).get("observedGeneration") != 1
        or not (o.get("status") or {}).get("conditions")
    ]
    if len(items) != COUNT or unreconciled:
        return f"{len(items)} resources, not reconciled: {unreconciled}"
    by_owner: dict[str, list[str]] = {uid: [] for uid in owners}
    for child in children(api, namespace):
        ref = f"{child['kind']}/{child['metadata']['name']}"
        uids = [o["uid"] for o in child["metadata"].get("ownerReferences") or []]
        live = [u for u in uids if u in owners]
        if not live:
            return f"orphan {ref} (owners {uids})"
        by_owner[live[0]].append(ref)
    for uid, refs in by_owner.items():
        meta = owners[uid]["metadata"]
        want = rendered(meta["name"], namespace, uid)
        if sorted(refs) != sorted(want):
            return f"{meta['name']}: children {sorted(refs)}, rendered {sorted(want)}"
    return None


def test_after_an_api_server_restart_mid_reconcile_twenty_resources_converge_exactly(
    cluster: Cluster, api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    custom = client.CustomObjectsApi(api)
    mark = operator.mark()

    def create(i: int) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": f"r-{i}"},
            "spec": TINY,
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(COUNT)))
    cluster.restart_apiserver()  # while the operator is still at work on them

    missing: list[str | None] = [None]

    def done() -> bool:
        missing[0] = converged(api, namespace)
        return missing[0] is None

    try:
        wait_until(done, timeout=180, interval=1, what="convergence after the restart")
    except AssertionError as e:
        raise AssertionError(f"{e}; still: {missing[0]}") from None
    # Reported, not crashed. An API server away for longer than the renew deadline (10 s; a
    # graceful stop and a start under load take about that) makes the leader exit on purpose, as
    # controller-runtime's does, and its container restart: that exit, and no other, is allowed.
    exits = operator.exits_since(mark)
    assert all("leader Lease lost" in why for why in exits), exits

    # The view's watches are live again: a child deleted by hand comes back, and a new resource
    # gets its children.
    apps = client.AppsV1Api(api)
    apps.delete_namespaced_deployment("r-0-cpu", namespace)
    create(COUNT)
    wait_until(
        lambda: (
            "r-0-cpu"
            in {
                d.metadata.name
                for d in apps.list_namespaced_deployment(
                    namespace, label_selector=f"{DEPLOYMENT_LABEL}=r-0"
                ).items
                if not d.metadata.deletion_timestamp
            }
        ),
        timeout=60,
        what="the deleted engine Deployment re-created",
    )
    wait_until(
        lambda: (
            apps.list_namespaced_deployment(
                namespace, label_selector=f"{DEPLOYMENT_LABEL}=r-{COUNT}"
            ).items
        ),
        timeout=60,
        what="children of a resource created after the restart",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_error_on_every_apply_backs_off_and_shows_in_status_until_it_clears(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    # An admission webhook that nothing serves: the API server answers every write of a
    # Deployment here with 500 "failed calling webhook", as it would for a webhook that is down.
    admission = client.AdmissionregistrationV1Api(api)
    hook = f"down-{namespace}"[:63]
    admission.create_validating_webhook_configuration(
        {
            "metadata": {"name": hook},
            "webhooks": [
                {
                    "name": "down.llmfleet.dev",
                    "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
                    "rules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["deployments"],
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "failurePolicy": "Fail",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 2,
                }
            ],
        }
    )
    custom = client.CustomObjectsApi(api)

    def degraded() -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "flaky")
        conditions = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Degraded"), {})

    try:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "flaky"}}
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, {**body, "spec": TINY}
        )
        failing = wait_until(
            lambda: degraded().get("reason") == "ReconcileFailing" and degraded(),
            timeout=60,
            what="Degraded=True ReconcileFailing",
        )
        assert failing["status"] == "True"
        assert "failed calling webhook" in failing["message"], failing
        assert "in a row; next try in" in failing["message"], failing
        # Backed off: few tries in 20 s, though the resync runs every 5 s and kopf retries too.
        since = utcnow()
        time.sleep(20)
        tries = [
            w for w in operator.writes_since(since, namespace) if "/deployments/" in w["requestURI"]
        ]
        assert len(tries) <= 8, [w["requestReceivedTimestamp"] for w in tries]
    finally:
        admission.delete_validating_webhook_configuration(hook)
    cleared = wait_until(
        lambda: degraded().get("reason") not in (None, "ReconcileFailing") and degraded(),
        timeout=120,
        what="Degraded no longer ReconcileFailing once the webhook is gone",
    )
    assert cleared["status"] == "False", cleared
    assert client.AppsV1Api(api).list_namespaced_deployment(namespace).items


LOSS_PRODUCT = "LLMFleet-Node-Loss-H100"  # this test's own nodes: no other test's pods land there


def test_a_lost_node_s_pods_come_back_where_gpus_allow_and_status_says_when_they_cannot(
    cluster: Cluster, api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    pool = Pool(name="loss", count=2, gpus=8, product=LOSS_PRODUCT, gpu_memory_mib=81559)
    cluster.apply_nodes([pool])
    cluster.wait_nodes_ready()
    custom, apps, core = (
        client.CustomObjectsApi(api),
        client.AppsV1Api(api),
        client.CoreV1Api(api),
    )
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "fleet"},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 16, "memoryGiB": 80, "perNode": 8, "product": LOSS_PRODUCT},
            "autoscaling": {"enabled": False},
        },
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def condition(ctype: str) -> dict[str, Any]:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "fleet")
        found = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in found if c["type"] == ctype), {})

    def running() -> list[client.V1Pod]:
        return [
            p
            for p in core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=engine"
            ).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        ]

    wait_until(lambda: len(running()) == 16, timeout=120, what="16 engine pods running")
    children = sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items)

    lost = "kwok-loss-1"
    core.delete_node(lost)
    # PodGC deletes the lost node's pods a few at a time; each one's replacement finds no GPU.
    wait_until(
        lambda: all(p.spec.node_name != lost for p in running()),
        timeout=180,
        interval=2,
        what="no pod left running on the lost node",
    )
    limited = wait_until(
        lambda: condition("ScalingLimited").get("status") == "True" and condition("ScalingLimited"),
        timeout=60,
        interval=2,
        what="ScalingLimited=True once the lost node's pods find no GPUs",
    )
    assert limited["reason"] == "InsufficientGPUs", limited
    assert len(running()) == 8  # the surviving node's, no more

    cluster.apply_nodes([pool])  # the node comes back
    wait_until(lambda: len(running()) == 16, timeout=180, interval=2, what="16 running again")
    wait_until(
        lambda: condition("ScalingLimited").get("status") == "False",
        timeout=60,
        what="ScalingLimited=False",
    )
    # Nothing orphaned or doubled: the same children as before the loss.
    assert sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items) == (
        children
    )
