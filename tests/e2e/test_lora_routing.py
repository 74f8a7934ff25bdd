"""Adapter-aware routing on real CPU vLLM engines: two engines, one adapter that loads on the first
and fails on the second (its source is deleted between the two engines' starts, so only the first
holds it). Each engine pod's adapters mark (pod condition llmfleet.dev/adapters-serving) names
what its engine serves; and no request for the adapter through the router gets a 404 from the
engine that lacks it.

The second test is a strict xfail: vllm-router 0.1.17 routes every request to any engine and does
not retry a 404 (docs/router.md, "Adapters"). When the routing lands it passes, and the marker
must go. See docs/lora.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack.load import TINY_GPUS, delete_llmd, tiny_llmd
from localcluster.routerapi import ROUTER_PORT, routed_engines
from localcluster.supervisor import REPO, Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.reconcile.llmdeployment.adapter_marks import marked

from . import localnode
from .harness import Operator, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (real vLLM engines as local processes)"),
]

NAME = "lora-routing"
BASE = "tiny"
ADAPTER = "solo"
REQUESTS = 20
SERVES_WITHIN = 300.0  # a vLLM pod on 2 shared cores starts in ~35-90 s
CHANGED_WITHIN = 60.0
TINY_LORA = REPO / "dev" / "dataplane" / "tiny_lora.py"
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
ROUTERS = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=router"


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=2) as node:
        yield node


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def engines(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=ENGINES).items
    return sorted((p for p in pods if ready(p)), key=lambda p: p.metadata.creation_timestamp)


def marks(api: client.ApiClient, namespace: str) -> list[frozenset[str] | None]:
    """Each Ready engine's adapters mark, oldest pod first."""
    core = client.CoreV1Api(api)
    return [marked(api.sanitize_for_serialization(p)) for p in engines(core, namespace)]


def served(api: client.ApiClient, namespace: str) -> dict[str, tuple[int, str | None]]:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "llmdeployments", NAME
    )
    adapters = (body.get("status") or {}).get("adapters") or []
    return {a["name"]: (a["engines"], a.get("error")) for a in adapters}


def complete(router_ip: str, model: str) -> int:
    body = {"model": model, "prompt": "Hello", "max_tokens": 2, "temperature": 0}
    req = urllib.request.Request(
        f"http://{router_ip}:{ROUTER_PORT}/v1/completions",
        json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def llmd(gpus: int, source: str) -> dict[str, Any]:
    body = tiny_llmd(NAME, spec={"gpus": {**TINY_GPUS, "count": gpus}}, enabled=False)
    spec = body["spec"]
    spec["model"]["servedModelName"] = BASE
    spec["engine"]["lora"] = {"maxAdapters": 1}
    # On although one pod is planned at first: the fleet grows to two engines behind it.
    spec["router"] = {"enabled": True}
    spec["adapters"] = [{"name": ADAPTER, "source": source}]
    return body


@pytest.fixture(scope="module")
def split_fleet(
    operator: Operator,
    api: client.ApiClient,
    cluster: Cluster,
    namespace: str,
    node_runner: str,
    vllm_python: Path,
) -> Iterator[str]:
    """Two engines, ADAPTER loaded on the first only; yields the router pod's IP."""
    core = client.CoreV1Api(api)
    made = subprocess.run(
        [str(vllm_python), str(TINY_LORA), ADAPTER, "--seed", "4"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()[-1]
    copy = Path(tempfile.mkdtemp(prefix="lora-routing-")) / ADAPTER
    shutil.copytree(made, copy)
    apply = ("apply", "-n", namespace, "-f", "-")
    cluster.kubectl(*apply, input=yaml.safe_dump(llmd(1, str(copy))))
    try:
        wait_until(lambda: len(engines(core, namespace)) == 1, SERVES_WITHIN, 1, "engine 1")
        wait_until(lambda: served(api, namespace) == {ADAPTER: (1, None)}, CHANGED_WITHIN, 1)
        # Gone before the second engine starts: it cannot load what the first holds.
        shutil.rmtree(copy.parent)
        cluster.kubectl(*apply, input=yaml.safe_dump(llmd(2, str(copy))))
        wait_until(lambda: len(engines(core, namespace)) == 2, SERVES_WITHIN, 1, "engine 2")
        (router,) = wait_until(
            lambda: (
                [
                    p
                    for p in core.list_namespaced_pod(namespace, label_selector=ROUTERS).items
                    if ready(p)
                ]
                or None
            ),
            SERVES_WITHIN,
            1,
            "the router pod Ready",
        )
        rip = router.status.pod_ip
        wait_until(lambda: len(routed_engines(rip)) == 2, 60, 1, "the router routing both")
        yield rip
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
        delete_llmd(api, namespace, NAME)


def test_each_engine_is_marked_with_the_adapters_it_serves(
    split_fleet: str, api: client.ApiClient, namespace: str
) -> None:
    wait_until(
        lambda: marks(api, namespace) == [frozenset({ADAPTER}), frozenset()],
        CHANGED_WITHIN,
        1,
        "the first engine marked with the adapter, the second with none",
    )
    engines_serving, error = served(api, namespace)[ADAPTER]
    assert engines_serving == 1
    assert "No adapter found" in str(error)
    assert complete(split_fleet, BASE) == 200


@pytest.mark.xfail(
    strict=True,
    reason="vllm-router 0.1.17 sends a request for any adapter to any engine and does not retry "
    "a 404 (docs/router.md, 'Adapters'); the router does not read the adapters mark yet",
)
def test_no_request_for_an_adapter_gets_a_404_from_an_engine_without_it(
    split_fleet: str,
) -> None:
    statuses = [complete(split_fleet, ADAPTER) for _ in range(REQUESTS)]
    assert statuses.count(404) == 0, statuses
    assert statuses.count(200) == REQUESTS, statuses
