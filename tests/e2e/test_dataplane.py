"""A real vLLM data plane on the local cluster: pods bound to the node runner's `local-gpu-0` run
vLLM's OpenAI server on the CPU, from the pod's own command and args, bound to the pod's loopback
IP; readiness follows the real /health; deletion drains in-flight requests.

The first run installs vLLM for CPU (dev/dataplane/install-vllm.sh: ~6 GB, a few minutes);
later runs reuse it. A vLLM process takes ~35-90 s to start on 2 cores, so the first three tests
share one engine; the last starts one on a cluster of its own and waits only for its process.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clusters import fresh_namespace
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from localcluster.noderunner import procs
from localcluster.supervisor import (
    CLUSTER_INDEX,
    KEDA,
    REPO,
    RUNNER_POD_NETWORK,
    Cluster,
    Ports,
)

from .harness import wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (real vLLM engines as local processes)"),
]

NODE = "local-gpu-0"
PRODUCT = "LLMFleet-CPU-Emulated"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
POD_NETWORK = ipaddress.ip_network(RUNNER_POD_NETWORK)
STARTUP_TIMEOUT = 300  # a vLLM pod on 2 shared cores; ~35-90 s usually


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    was_running = cluster.alive("node-runner")
    yield cluster.start_node_runner(gpus=4)
    if not was_running and cluster.alive("node-runner"):
        cluster.stop_node_runner()


# One engine for the first three tests (each vLLM start costs 35-90 s here): the first sees it
# start, the second queues on it, the third deletes its pod (so it runs last; a test run alone
# waits for the engine itself). Two sequences at once (the queue test) and room for the drain
# test's long requests.
SHARED = "shared"
SHARED_ARGS = ("--max-num-seqs", "2", "--max-model-len", "2048", "--shutdown-timeout", "60")


@pytest.fixture(scope="module")
def shared(
    api: client.ApiClient,
    test_namespaces: list[str],
    finish_namespace: Callable[[str], None],
    node_runner: str,
) -> Iterator[str]:
    """The namespace of the shared engine's Deployment, created (not awaited) here."""
    with fresh_namespace(api, "dataplane", test_namespaces, finish_namespace) as ns:
        deployment = vllm_deployment(SHARED, SHARED_ARGS, pre_stop_seconds=1)
        client.AppsV1Api(api).create_namespaced_deployment(ns, deployment)
        yield ns


def vllm_deployment(
    name: str,
    extra_args: tuple[str, ...] = (),
    pre_stop_seconds: int | None = None,
    grace_seconds: int = 120,
) -> dict[str, Any]:
    """Shaped like the operator's engine Deployment (render/engine.py)."""
    labels = {"app": name}
    container: dict[str, Any] = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.32.0",
        "command": ["vllm", "serve"],
        "args": [
            "llmfleet-test/tiny-llama",
            "--served-model-name",
            "tiny",
            "--max-model-len",
            "512",
            "--tensor-parallel-size",
            "1",
            "--gpu-memory-utilization",
            "0.9",
            *extra_args,
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
        ],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "startupProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 2,
            "failureThreshold": STARTUP_TIMEOUT // 2,
        },
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 2,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
    }
    if pre_stop_seconds is not None:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": pre_stop_seconds}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "nodeSelector": {"nvidia.com/gpu.product": PRODUCT},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "terminationGracePeriodSeconds": grace_seconds,
                    "enableServiceLinks": False,
                },
            },
        },
    }


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def the_pod(core: client.CoreV1Api, ns: str, app: str) -> client.V1Pod | None:
    pods = core.list_namespaced_pod(ns, label_selector=f"app={app}").items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    return live[0] if live else None


def http_get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""


def gauge(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def openai_client(python: Path, code: str, timeout: float = 300) -> Any:
    """Run `code` with the openai client (it lives in the vLLM virtualenv); it prints JSON."""
    out = subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, timeout=timeout
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def ready_pod(api: client.ApiClient, ns: str, name: str) -> client.V1Pod:
    core = client.CoreV1Api(api)
    pod = wait_until(lambda: (p := the_pod(core, ns, name)) and ready(p) and p, STARTUP_TIMEOUT, 1)
    assert pod.spec.node_name == NODE
    return pod


def test_vllm_pod_is_ready_only_once_health_answers_and_serves_completions(
    api: client.ApiClient, shared: str, node_runner: str, vllm_python: Path
) -> None:
    core = client.CoreV1Api(api)
    namespace = shared
    pod = wait_until(lambda: (p := the_pod(core, namespace, SHARED)) and p.status.pod_ip and p, 180)
    ip = pod.status.pod_ip
    assert pod.spec.node_name == node_runner
    assert ipaddress.ip_address(ip) in LOOPBACK
    assert ipaddress.ip_address(ip) in POD_NETWORK

    # Sample the pod's Ready condition against vLLM's own /health until the pod is Ready.
    samples: list[tuple[bool, int]] = []
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        p = core.read_namespaced_pod(pod.metadata.name, namespace)
        is_ready = ready(p)
        samples.append((is_ready, http_get(f"http://{ip}:8000/health", timeout=2)[0]))
        if is_ready:
            break
        time.sleep(0.5)
    assert samples[-1][0], f"pod not Ready after {STARTUP_TIMEOUT}s"
    assert any(not r and code != 200 for r, code in samples), "never saw it not-ready first"
    assert all(code == 200 for r, code in samples if r), "Ready while /health did not answer"
    created = p.metadata.creation_timestamp.timestamp()
    ready_at = next(c for c in p.status.conditions if c.type == "Ready").last_transition_time
    print(f"vLLM pod Ready {ready_at.timestamp() - created:.0f}s after creation")
    status = p.status.container_statuses[0]
    assert status.ready
    assert status.started
    assert status.state.running
    assert p.status.phase == "Running"
    assert p.status.host_ip == "127.0.0.1"

    base = f"http://{ip}:8000/v1"
    got = openai_client(
        vllm_python,
        "import json, openai\n"
        f"c = openai.OpenAI(base_url={base!r}, api_key='unused')\n"
        "r = c.completions.create(model='tiny', prompt='Hello, world', max_tokens=16)\n"
        "ch = c.chat.completions.create(model='tiny', max_tokens=8,\n"
        "    messages=[{'role': 'user', 'content': 'Hi'}])\n"
        "print(json.dumps({'text': r.choices[0].text, 'n': r.usage.completion_tokens,\n"
        "    'chat': ch.choices[0].message.content}))",
    )
    assert got["text"]
    assert got["n"] > 0
    assert got["chat"] is not None
    code, metrics = http_get(f"http://{ip}:8000/metrics")
    assert code == 200
    assert "vllm:num_requests_waiting" in metrics
    assert gauge(metrics, "vllm:num_requests_running") == 0
    # The pod's own command line ran, with the documented adaptations applied.
    log = (Path(os.environ.get("LLMFLEET_CLUSTER_DIR", REPO / ".cluster")) / "pods").joinpath(
        f"{namespace}_{pod.metadata.name}.log"
    )
    text = log.read_text()
    assert f"--host', '{ip}'" in text
    assert "--enforce-eager" in text
    assert "--gpu-memory-utilization" not in text.split("node-runner: start", 1)[1].split("\n")[0]


def test_waiting_gauge_rises_with_more_requests_than_max_num_seqs(
    api: client.ApiClient, shared: str, node_runner: str, vllm_python: Path
) -> None:
    pod = ready_pod(api, shared, SHARED)  # --max-num-seqs 2
    ip = pod.status.pod_ip
    result: dict[str, Any] = {}

    def load() -> None:
        result["out"] = openai_client(
            vllm_python,
            "import json, openai, concurrent.futures as cf\n"
            f"c = openai.OpenAI(base_url='http://{ip}:8000/v1', api_key='unused', timeout=240)\n"
            "def one(i):\n"
            "    r = c.completions.create(model='tiny', prompt=f'Request {i}', max_tokens=400,\n"
            "        extra_body={'ignore_eos': True})\n"
            "    return r.usage.completion_tokens\n"
            "with cf.ThreadPoolExecutor(20) as ex:\n"
            "    print(json.dumps(list(ex.map(one, range(20)))))",
        )

    t = threading.Thread(target=load)
    t.start()
    peak_waiting = peak_running = 0.0
    while t.is_alive():
        code, metrics = http_get(f"http://{ip}:8000/metrics", timeout=5)
        if code == 200:
            peak_waiting = max(peak_waiting, gauge(metrics, "vllm:num_requests_waiting"))
            peak_running = max(peak_running, gauge(metrics, "vllm:num_requests_running"))
        time.sleep(0.2)
    t.join()
    print(f"peak waiting {peak_waiting:.0f}, peak running {peak_running:.0f}")
    assert result["out"] == [400] * 20
    assert peak_running <= 2
    assert peak_waiting > 10


def test_deleting_a_pod_drains_its_in_flight_request_then_the_pod_and_process_go(
    api: client.ApiClient, shared: str, node_runner: str, vllm_python: Path, cluster: Cluster
) -> None:
    # vLLM 0.32 drains on SIGTERM only with --shutdown-timeout (the shared engine's 60 s); its
    # default (0) aborts in-flight requests (they end early with finish_reason "abort").
    namespace = shared
    pod = ready_pod(api, namespace, SHARED)
    core = client.CoreV1Api(api)
    ip, name, uid = pod.status.pod_ip, pod.metadata.name, pod.metadata.uid
    result: dict[str, Any] = {}

    def long_requests() -> None:
        result["out"] = openai_client(
            vllm_python,
            "import json, openai, concurrent.futures as cf\n"
            f"c = openai.OpenAI(base_url='http://{ip}:8000/v1', api_key='unused', timeout=240)\n"
            "def one(i):\n"
            "    r = c.completions.create(model='tiny', prompt='Once', max_tokens=1900,\n"
            "        extra_body={'ignore_eos': True})\n"
            "    return [r.usage.completion_tokens, r.choices[0].finish_reason]\n"
            "with cf.ThreadPoolExecutor(2) as ex:\n"
            "    print(json.dumps(list(ex.map(one, range(2)))))",
        )
        result["done"] = time.monotonic()

    t = threading.Thread(target=long_requests)
    t.start()
    wait_until(
        lambda: gauge(http_get(f"http://{ip}:8000/metrics")[1], "vllm:num_requests_running") >= 2,
        60,
        0.1,
    )
    deleted = time.monotonic()
    core.delete_namespaced_pod(name, namespace)
    # Not Ready at once; the pod object stays while vLLM drains.
    wait_until(lambda: not ready(core.read_namespaced_pod(name, namespace)), 5, 0.2)
    t.join(240)
    assert result["out"] == [[1900, "length"]] * 2, result
    assert result["done"] - deleted > 1  # the requests outlived the preStop hook: drained

    def gone() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until(gone, 90)
    print(
        f"requests done {result['done'] - deleted:.1f}s after the delete; "
        f"pod object gone {time.monotonic() - deleted:.1f}s after it"
    )
    runner = procs.runner_id(NODE, cluster.state_dir)
    assert not [p for p in procs.find(procs.marker(runner, uid)) if procs.alive(p)]
    assert http_get(f"http://{ip}:8000/health", timeout=2)[0] == 0
    # The Deployment's replacement comes up elsewhere on the same node, with another IP.
    replacement = wait_until(
        lambda: (p := the_pod(core, namespace, SHARED)) and p.status.pod_ip and p, 60
    )
    assert replacement.status.pod_ip != ip
    # Gone at once rather than after its grace period: a vLLM still starting holds SIGTERM.
    client.AppsV1Api(api).delete_namespaced_deployment(SHARED, namespace)
    core.delete_namespaced_pod(replacement.metadata.name, namespace, grace_period_seconds=0)


def test_cluster_down_leaves_no_vllm_or_runner_process(vllm_python: Path) -> None:
    """On a cluster of its own (other ports, another pod network), so that stopping it disturbs
    nobody else's tests on the shared one."""
    state = Path(tempfile.mkdtemp(prefix="llmfleet-down-"))
    c = Cluster(
        state_dir=state,
        ports=Ports.shifted(10000),
    )
    try:
        c.up(log=lambda _: None)
        own_network = f"127.{18 + 10 * CLUSTER_INDEX}.0.0/16"
        c.start_node_runner(gpus=1, pod_network=own_network)
        api = config.new_client_from_config(config_file=str(c.kubeconfig))
        # Its vLLM process running is enough (Ready would cost its whole start).
        client.AppsV1Api(api).create_namespaced_deployment("default", vllm_deployment("down"))
        core = client.CoreV1Api(api)
        pod = wait_until(lambda: (p := the_pod(core, "default", "down")) and p.status.pod_ip and p)
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(own_network)
        runner = procs.runner_id(NODE, state)
        wait_until(lambda: procs.find(procs.marker(runner, pod.metadata.uid)), 60, 0.5)
        runner_pid = int((state / "node-runner.pid").read_text())
        # Every component ran, KEDA's operator and adapter (on the ports above) among them.
        assert all(c.running().values()), c.running()
        keda_pids = [int((state / f"{n}.pid").read_text()) for n in KEDA] if c.keda else []
        c.down()
        assert not [p for p in keda_pids if procs.alive(p)]
        assert not procs.alive(runner_pid)
        assert not [p for p in procs.find(procs.marker(runner)) if procs.alive(p)]
        assert not (state / "node-runner.pid").exists()
        leftovers = subprocess.run(
            ["pgrep", "-f", str(state)], capture_output=True, text=True, check=False
        ).stdout.split()
        assert [p for p in leftovers if procs.alive(int(p))] == []
    finally:
        c.wipe()
