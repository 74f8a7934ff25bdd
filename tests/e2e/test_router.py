"""The vLLM Router in front of a multi-replica LLMDeployment, end to end on the local cluster: the
operator (as the chart's ServiceAccount) renders the router, the node runner runs it for real
(`vllm-router` with Kubernetes discovery, as the Role the operator rendered) in front of engines
on `local-gpu-0`, and OpenAI-client traffic through it reaches every ready engine, follows a
scale-up and a scale-down without a router restart, and survives an engine killed mid-load. See
docs/router.md.

The engines are the engine stand-in (dev/localcluster/standin, docs/cpu-adaptations.md item 20):
what this test checks is the router and the operator (discovery, balancing, draining, retries),
not vLLM, and the stand-in serves vLLM's API, /health and /metrics (held to the pinned vLLM by
tests/e2e/test_engine_standin_contract.py, its drain on SIGTERM included). It is up in seconds
where a vLLM engine takes 35-90 s. A chat completion through the router to a real vLLM is
test_demo.py's (tests/README.md, "Real vLLM or the stand-in").

The engine Service has no endpoints here (pod IPs are loopback, there is no kube-proxy), so the
clients dial the router pod's IP, as they would dial the router Service in a real cluster.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from localcluster.metricsstack.load import TINY_GPUS, TINY_MODEL, tiny_llmd
from localcluster.noderunner import procs
from localcluster.promtext import per_worker, scrape
from localcluster.routerapi import routed_engines
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP as GROUP
from llmfleet import API_VERSION as VERSION
from llmfleet.models.deployment import PLURAL

from . import localnode
from .harness import Operator, stand_in, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (vLLM engines and the vLLM Router as local processes)"),
]

NODE = "local-gpu-0"
NAME = "routed"
ENGINES = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
ROUTERS = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=router"
NODE_GPUS = 4  # 3 engines at most, and one slot to spare for an engine being replaced
STARTUP_TIMEOUT = 120  # the stand-in: Ready at the startup probe after its 1 s warm-up
MAX_TOKENS = 24
# A stand-in engine step: a request of MAX_TOKENS takes 1.2 s, so the 90 requests (4 at a time)
# of the scale-down and the kill take about 30 s and are still running when the engine is killed.
TOKEN_SECONDS = 0.05

# Runs with the vLLM virtualenv's python (it has the `openai` package). The client's own retries
# are off, so every failure the router lets through is counted.
LOAD = """
import concurrent.futures as cf, json, sys, time, openai
base, n, conc, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = openai.OpenAI(base_url=base, api_key="unused", timeout=180, max_retries=0)
def one(i):
    t = time.time()
    try:
        r = c.completions.create(model="tiny", prompt=f"Request {i}", max_tokens=max_tokens,
                                 extra_body={"ignore_eos": True})
        return {"ok": r.usage.completion_tokens == max_tokens, "start": t, "end": time.time()}
    except Exception as e:
        return {"ok": False, "error": repr(e)[:300], "start": t, "end": time.time()}
with cf.ThreadPoolExecutor(conc) as ex:
    print(json.dumps(list(ex.map(one, range(n)))))
"""


def llmd(gpus: int) -> dict[str, Any]:
    body = tiny_llmd(
        NAME,
        max_num_seqs=4,
        # MultiPod, tensor parallel 1: one engine per GPU slot of local-gpu-0.
        spec={
            "model": {**TINY_MODEL, "servedModelName": "tiny"},
            "gpus": {**TINY_GPUS, "count": gpus},
        },
        # A fixed size: the test scales through spec.gpus.count (the router is on by default
        # because more than one pod is planned).
        enabled=False,
    )
    return stand_in(body, token_seconds=TOKEN_SECONDS)


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=NODE_GPUS) as node:
        yield node


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def live_pods(core: client.CoreV1Api, ns: str, selector: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    return [p for p in pods if not p.metadata.deletion_timestamp]


def ready_ips(core: client.CoreV1Api, ns: str, selector: str) -> set[str]:
    return {p.status.pod_ip for p in live_pods(core, ns, selector) if ready(p)}


def engine_successes(ip: str) -> float:
    m = scrape(f"http://{ip}:8000/metrics")
    return sum(v for k, v in m.items() if k.startswith("vllm:request_success_total"))


def load(python: Path, base: str, n: int, conc: int) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(python), "-c", LOAD, base, str(n), str(conc), str(MAX_TOKENS)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result: list[dict[str, Any]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def failures(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if not r["ok"]]


def scale(api: client.ApiClient, ns: str, gpus: int) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, NAME, {"spec": {"gpus": {"count": gpus}}}
    )


def can_i(cluster: Cluster, ns: str, *args: str) -> bool:
    account = f"system:serviceaccount:{ns}:{NAME}-router"
    out = subprocess.run(
        [
            str(cluster.kubectl_path()),
            f"--kubeconfig={cluster.kubeconfig}",
            "auth",
            "can-i",
            *args,
            f"--as={account}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() == "yes"


def test_router_balances_follows_scaling_and_hides_a_lost_engine(
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    operator: Operator,
    node_runner: str,
    vllm_python: Path,
) -> None:
    t0 = time.monotonic()
    core = client.CoreV1Api(api)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, llmd(gpus=2)
    )

    # --- RBAC: the operator (chart RBAC) made the router's identity; it reads pods, nothing more.
    wait_until(
        lambda: live_pods(core, namespace, ROUTERS),
        60,
        what="the operator's router Deployment",
    )
    ns = namespace
    assert can_i(cluster, ns, "list", "pods", "-n", ns)
    assert can_i(cluster, ns, "watch", "pods", "-n", ns)
    assert can_i(cluster, ns, "get", "pods", "-n", ns)
    for verb, what, where in (
        ("list", "pods", "default"),  # another namespace
        ("create", "pods", ns),
        ("delete", "pods", ns),
        ("get", "secrets", ns),
        ("list", "services", ns),
        ("list", "endpointslices.discovery.k8s.io", ns),
        ("list", "llmdeployments.llmfleet.dev", ns),
    ):
        assert not can_i(cluster, ns, verb, what, "-n", where), f"router may {verb} {what}"

    # --- Two engines and the router come up; status names the router's Service.
    def two_ready() -> set[str] | None:
        ips = ready_ips(core, namespace, ENGINES)
        return ips if len(ips) == 2 else None

    engines = wait_until(two_ready, STARTUP_TIMEOUT, 2, "2 engine pods Ready")
    (router_pod,) = wait_until(
        lambda: [p for p in live_pods(core, namespace, ROUTERS) if ready(p)],
        120,
        what="the router pod Ready",
    )
    assert router_pod.spec.node_name == NODE
    status = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, NAME
    )["status"]
    assert status["endpoint"] == f"http://{NAME}-router.{namespace}.svc:8000/v1"
    rip = router_pod.status.pod_ip
    base, metrics_url = f"http://{rip}:8000/v1", f"http://{rip}:29000/metrics"

    wait_until(lambda: routed_engines(rip) >= engines, 60, 1, "the router discovering both engines")
    print(f"2 engines + router ready after {time.monotonic() - t0:.0f}s")

    # --- Traffic through the router reaches every ready engine.
    before = {ip: engine_successes(ip) for ip in engines}
    results = load(vllm_python, base, n=24, conc=6)
    assert failures(results) == []
    routed = per_worker(scrape(metrics_url), "vllm_router_processed_requests_total")
    served = {ip: engine_successes(ip) - before[ip] for ip in engines}
    print(f"24 requests: router sent {routed}, engines served {served}")
    assert all(routed.get(ip, 0) > 0 for ip in engines), routed
    assert all(served[ip] > 0 for ip in engines), served

    # --- Scale up: the new engine joins without a router restart and gets requests.
    scale(api, namespace, 3)

    def three_ready() -> set[str] | None:
        ips = ready_ips(core, namespace, ENGINES)
        return ips if len(ips) == 3 else None

    all_three = wait_until(three_ready, STARTUP_TIMEOUT, 2, "a third engine Ready")
    (new_ip,) = all_three - engines
    wait_until(
        lambda: new_ip in routed_engines(rip), 60, 1, "the router discovering the new engine"
    )
    results = load(vllm_python, base, n=24, conc=6)
    assert failures(results) == []
    routed = per_worker(scrape(metrics_url), "vllm_router_processed_requests_total")
    print(f"after scale-up: router sent {routed}")
    assert routed.get(new_ip, 0) > 0

    # --- Scale down, then kill an engine, both under load: no request fails.
    results_box: dict[str, list[dict[str, Any]]] = {}
    loader = threading.Thread(
        target=lambda: results_box.update(r=load(vllm_python, base, n=90, conc=4)),
        daemon=True,
    )
    loader.start()
    time.sleep(5)
    scale(api, namespace, 2)

    def draining() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=ENGINES).items
        return next((p for p in pods if p.metadata.deletion_timestamp), None)

    victim = wait_until(draining, 30, 0.2, "an engine being deleted")
    marked = time.monotonic()
    wait_until(
        lambda: victim.status.pod_ip not in routed_engines(rip), 15, 0.2, "the router dropping it"
    )
    print(f"router dropped the draining engine {time.monotonic() - marked:.1f}s after delete")
    sent_at_drop = per_worker(scrape(metrics_url), "vllm_router_processed_requests_total")
    sent_to_victim = sent_at_drop.get(victim.status.pod_ip, 0)

    survivors = sorted(ready_ips(core, namespace, ENGINES) - {victim.status.pod_ip})
    killed = next(p for p in live_pods(core, namespace, ENGINES) if p.status.pod_ip == survivors[0])
    time.sleep(3)
    assert loader.is_alive(), "the load ended before the kill"
    runner = procs.runner_id(NODE, cluster.state_dir)
    procs.kill_all(procs.marker(runner, killed.metadata.uid))  # SIGKILL, as an OOM kill
    print(f"killed engine {killed.metadata.name} ({survivors[0]})")
    loader.join(600)
    results = results_box["r"]
    metrics = scrape(metrics_url)
    retries = sum(v for k, v in metrics.items() if k.startswith("vllm_router_retries_total"))
    print(
        f"90 requests through a scale-down and a kill: {len(failures(results))} failed, "
        f"router retries {retries:.0f}; errors {failures(results)[:3]}"
    )
    assert failures(results) == []
    # The draining engine got nothing new once the router had dropped it.
    after = per_worker(metrics, "vllm_router_processed_requests_total")
    assert after.get(victim.status.pod_ip, 0) == sent_to_victim
    # The router never restarted: it followed every change through its watch.
    rp = core.read_namespaced_pod(router_pod.metadata.name, namespace)
    assert rp.status.container_statuses[0].restart_count == 0
    print(f"test took {time.monotonic() - t0:.0f}s")
