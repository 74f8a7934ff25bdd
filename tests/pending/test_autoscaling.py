"""Queue-depth autoscaling end to end, on the production metrics path: real vLLM engines (the node
runner's `local-gpu-0`), Prometheus discovering and scraping them, prometheus-adapter serving
`custom.metrics.k8s.io` through the aggregation layer, and the HPA controller of
kube-controller-manager scaling the Deployment the operator made. See docs/autoscaling.md.

One LLMDeployment, one test (engines start slowly on 2 cores): the queue builds under load, the
HPA adds pods, the one that finds no GPU makes the LLMDeployment report ScalingLimited, the new
engine takes load and the queue per pod falls; after the load stops it scales back down, and the
pod it removes finishes the requests it has in flight before it exits.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e.harness import Operator
from kubernetes import client, config
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.config import ENGINE_JOB, OPERATOR_JOB
from localcluster.metricsstack.load import (
    GROUP,
    PLURAL,
    VERSION,
    EngineLoad,
    free_gpus,
    hold_gpus,
    pod_ready,
    summarize,
    tiny_llmd,
    wait_until,
)
from localcluster.supervisor import REPO, RUNNER_POD_NETWORK, Cluster

pytestmark = pytest.mark.cluster

NODE_GPUS = 2  # the node runner's GPU slots: maxReplicas 3 leaves one pod Pending
INSTALL = REPO / "tests" / "dataplane" / "install-vllm.sh"
NAME = "auto"
SELECTOR = f"llmfleet.dev/deployment={NAME},app.kubernetes.io/component=engine"
TARGET_QUEUE_DEPTH = 2
MAX_NUM_SEQS = 2
LOAD_CONCURRENCY = 10  # 1 pod: 2 running, 8 waiting -> 4x the target
STARTUP_TIMEOUT = 300  # a vLLM engine on 2 busy cores: ~40-90 s


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    out = subprocess.run([str(INSTALL)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "bin" / "python"


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    was_running = cluster._alive("node-runner")
    node = cluster.start_node_runner(gpus=NODE_GPUS)
    yield node
    if not was_running and cluster._alive("node-runner"):
        # Let deleted pods finish draining first: a pod left Terminating without its kubelet
        # would hold its GPU when the runner next starts.
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: (
                    not core.list_pod_for_all_namespaces(
                        field_selector=f"spec.nodeName={node}"
                    ).items
                ),
                150,
                1,
            )
        cluster.stop_node_runner()


def get_llmd(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, NAME
    )
    return obj


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def health(ip: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


@dataclass
class PodTrack:
    created: float
    ready: float | None = None  # first sample Ready
    health_ok: float | None = None  # first sample where /health answered 200
    deleting: float | None = None  # first sample with a deletionTimestamp
    gone: float | None = None
    node: str | None = None
    ip: str | None = None
    ready_while_unhealthy: int = 0


@dataclass
class Monitor:
    """Samples the HPA, the LLMDeployment's status, the pods and Prometheus once a second."""

    api: client.ApiClient
    namespace: str
    stack: MetricsStack
    samples: list[dict[str, Any]] = field(default_factory=list)
    pods: dict[str, PodTrack] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Monitor:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def last(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as e:  # an API hiccup must not end the monitor
                print(f"monitor: {e!r}")
            self._stop.wait(1.0)

    def _sample(self) -> None:
        now = time.time()
        core = client.CoreV1Api(self.api)
        hpa = client.AutoscalingV2Api(self.api).read_namespaced_horizontal_pod_autoscaler(
            NAME, self.namespace
        )
        obj = get_llmd(self.api, self.namespace)
        st = obj.get("status") or {}
        pods = core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
        seen = set()
        for p in pods:
            name = p.metadata.name
            seen.add(name)
            t = self.pods.setdefault(name, PodTrack(created=now))
            t.node = p.spec.node_name
            t.ip = p.status.pod_ip or t.ip
            if p.metadata.deletion_timestamp and t.deleting is None:
                t.deleting = now
            code = health(p.status.pod_ip) if p.status.pod_ip else 0
            if code == 200 and t.health_ok is None:
                t.health_ok = now
            if pod_ready(p):
                t.ready = t.ready or now
                if code != 200 and not p.metadata.deletion_timestamp:
                    t.ready_while_unhealthy += 1
        for name, t in self.pods.items():
            if name not in seen and t.gone is None:
                t.gone = now
        waiting = self.stack.value(
            f'avg(vllm:num_requests_waiting{{namespace="{self.namespace}"}})', default=0.0
        )
        self.samples.append(
            {
                "t": now,
                "hpa_desired": hpa.status.desired_replicas,
                "hpa_current": hpa.status.current_replicas,
                "replicas": st.get("replicas"),
                "current": st.get("currentReplicas"),
                "ready": st.get("readyReplicas"),
                "scaling_limited": condition(obj, "ScalingLimited"),
                "pending": sum(1 for p in pods if p.status.phase == "Pending"),
                "waiting_avg": waiting,
            }
        )


def test_queue_depth_scales_engines_up_under_load_and_down_draining(
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    operator: Operator,
    metrics_stack: MetricsStack,
    node_runner: str,
    vllm_python: Path,
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    core = client.CoreV1Api(api)
    metrics_stack.scrape(OPERATOR_JOB, f"127.0.0.1:{operator.metrics_port}")
    # (Pods of an earlier test may still be draining.)
    free = wait_until(
        lambda: (n := free_gpus(core, node_runner)) >= NODE_GPUS and n,
        150,
        2,
        f"{NODE_GPUS} free GPUs on {node_runner}",
    )
    if free > NODE_GPUS:
        hold_gpus(core, namespace, free - NODE_GPUS)

    body = tiny_llmd(
        NAME,
        max_num_seqs=MAX_NUM_SEQS,
        minReplicas=1,
        maxReplicas=3,
        targetQueueDepth=TARGET_QUEUE_DEPTH,
        scaleDownStabilizationSeconds=20,
    )
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))

    def ready_names() -> list[str]:
        pods = core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
        return sorted(
            p.metadata.name for p in pods if pod_ready(p) and not p.metadata.deletion_timestamp
        )

    first = wait_until(ready_names, STARTUP_TIMEOUT, 1, "the first engine pod Ready")[0]
    print(f"first engine Ready at +{time.monotonic() - t0:.0f}s")

    # --- the metrics path, idle ---------------------------------------------------------------
    def discovered() -> list[dict[str, Any]]:
        return [
            t
            for t in metrics_stack.active_targets(ENGINE_JOB)
            if t["labels"].get("namespace") == namespace
            and t["labels"].get("pod") == first
            and t["health"] == "up"
        ]

    (target,) = wait_until(discovered, 30, 1, "Prometheus scraping the engine pod")
    assert target["labels"]["llmdeployment"] == NAME
    pod_ip = core.read_namespaced_pod(first, namespace).status.pod_ip
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(RUNNER_POD_NETWORK)
    assert target["scrapeUrl"] == f"http://{pod_ip}:8000/metrics"
    # What the HPA controller reads: through the aggregator, the adapter and Prometheus.
    served = wait_until(
        lambda: metrics_stack.custom_metric(namespace), 30, 1, "custom metric for the pod"
    )
    assert served == {first: 0.0}
    hpas = client.AutoscalingV2Api(api)
    wait_until(
        lambda: any(
            c.type == "ScalingActive" and c.status == "True"
            for c in hpas.read_namespaced_horizontal_pod_autoscaler(
                NAME, namespace
            ).status.conditions
            or []
        ),
        30,
        1,
        "the HPA reading its metric (ScalingActive)",
    )
    # The other two sources the dashboards read, with the labels they expect.
    wait_until(
        lambda: metrics_stack.query(
            f'kube_pod_labels{{namespace="{namespace}", label_llmfleet_dev_deployment="{NAME}"}}'
        ),
        30,
        1,
        "kube-state-metrics' kube_pod_labels",
    )
    wait_until(
        lambda: metrics_stack.query(
            f'llmfleet_condition{{namespace="{namespace}", llmdeployment="{NAME}"}}'
        ),
        30,
        1,
        "the operator's llmfleet_condition (honor_labels)",
    )

    with (
        Monitor(api, namespace, metrics_stack) as mon,
        EngineLoad(api, namespace, SELECTOR, vllm_python, tmp_path / "load") as load,
    ):
        # --- scale up under load ----------------------------------------------------------
        load_start = time.time()
        main = load.start("main", LOAD_CONCURRENCY, duration=400, max_tokens=96, timeout=120)
        wait_until(lambda: (mon.last().get("hpa_desired") or 0) > 1, 90, 1, "the HPA scaling up")
        desired_at = time.time()
        peak_one_pod = max(s["waiting_avg"] for s in mon.samples)
        wait_until(
            lambda: (
                condition(get_llmd(api, namespace), "ScalingLimited").get("reason")
                == "InsufficientGPUs"
            ),
            60,
            1,
            "ScalingLimited=True (InsufficientGPUs) for the pod that finds no GPU",
        )
        limited = condition(get_llmd(api, namespace), "ScalingLimited")
        assert limited["status"] == "True", limited
        assert "nvidia.com/gpu" in limited["message"], limited
        # Desired (the HPA's), current (pods that exist) and ready replicas.
        wait_until(
            lambda: (
                (
                    (st := get_llmd(api, namespace)["status"])["replicas"],
                    st["currentReplicas"],
                    st["readyReplicas"],
                )
                == (3, 3, 1)
            ),
            20,
            0.5,
            "status replicas 3, currentReplicas 3, readyReplicas 1",
        )

        two = wait_until(
            lambda: len(ready_names()) >= 2 and ready_names(),
            STARTUP_TIMEOUT,
            1,
            "the second engine Ready",
        )
        ready_at = time.time()
        print(
            f"load start -> HPA desired>1 {desired_at - load_start:.1f}s, "
            f"-> second engine Ready {ready_at - load_start:.1f}s "
            f"(peak avg waiting on one pod {peak_one_pod:.1f})"
        )
        # The new engine takes its share: both serve, and the queue per pod falls.
        time.sleep(15)
        served_by = {r["pod"] for r in main.records() if r["start"] > ready_at}
        assert set(two) <= served_by, (two, served_by)
        after = [s["waiting_avg"] for s in mon.samples if s["t"] > ready_at + 8]
        assert after
        assert max(after) < peak_one_pod, (peak_one_pod, after)
        obj = get_llmd(api, namespace)
        assert obj["status"]["readyReplicas"] == 2, obj["status"]
        assert condition(obj, "ScalingLimited")["status"] == "True"

        # --- load stops: scale down, draining the removed pod -----------------------------
        # A tail of long requests keeps each remaining pod busy (no queue) so the pod that is
        # removed has requests in flight when it is told to go.
        tail = load.start("tail", 2, duration=240, max_tokens=400, timeout=120)
        main.stop()
        load_end = time.time()
        print(f"main load stopped at +{time.monotonic() - t0:.0f}s")
        wait_until(
            lambda: condition(get_llmd(api, namespace), "ScalingLimited").get("status") == "False",
            90,
            1,
            "ScalingLimited=False once the Pending pod is scaled away",
        )

        def removed_engine() -> client.V1Pod | None:
            for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items:
                if p.metadata.name in two and p.metadata.deletion_timestamp:
                    return p
            return None

        gone_pod = wait_until(removed_engine, 150, 0.25, "a Ready engine pod removed")
        victim = gone_pod.metadata.name
        # deletionTimestamp is the deletion time plus the grace period (whole seconds).
        removed = gone_pod.metadata.deletion_timestamp.timestamp() - (
            gone_pod.metadata.deletion_grace_period_seconds or 0
        )
        wait_until(lambda: mon.pods[victim].gone, 150, 1, f"{victim} gone")
        tail.stop()
        wait_until(
            lambda: (mon.last().get("hpa_desired"), mon.last().get("ready")) == (1, 1),
            30,
            1,
            "one replica desired and ready",
        )
        final = get_llmd(api, namespace)["status"]
        print(f"scaled back to 1 at +{time.monotonic() - t0:.0f}s: {final['replicas']=}")

    # --- what the clients saw -------------------------------------------------------------------
    records = main.records() + tail.records()
    outcomes = summarize(records)
    print(f"requests: {outcomes}")
    errors = [r for r in records if r["outcome"] == "error"]
    assert not errors, errors[:5]  # none hung (client timeout) nor failed for good
    assert outcomes["ok"] >= 20
    assert all(r["tokens"] == 96 for r in main.records() if r["outcome"] == "ok")
    assert all(r["tokens"] == 400 for r in tail.records() if r["outcome"] == "ok")
    # The drained pod: every request it had when told to go ran to its full length.
    t = mon.pods[victim]
    assert t.deleting is not None
    assert t.gone is not None
    in_flight = [r for r in tail.records() if r["pod"] == victim and r["start"] < removed]
    straddling = [r for r in in_flight if r["end"] > removed]
    assert straddling, f"no request in flight on {victim} when it was removed"
    for r in in_flight:
        assert r["outcome"] == "ok", r
        assert (r["tokens"], r["finish"]) == (400, "length"), r
    last = max(r["end"] for r in straddling)
    assert t.gone >= last - 1.0  # the pod went only after finishing them
    print(
        f"{victim}: {len(straddling)} request(s) in flight at removal completed, the last "
        f"{last - removed:.1f}s after removal; pod gone {t.gone - removed:.1f}s after removal"
    )
    # Pods were Ready only while vLLM answered /health.
    assert all(p.ready_while_unhealthy == 0 for p in mon.pods.values()), mon.pods
    assert all(p.health_ok and p.ready >= p.health_ok for p in mon.pods.values() if p.ready)
    # The status followed the HPA the whole way.
    assert any(s["replicas"] == 3 and s["ready"] == 2 for s in mon.samples)
    assert load_end > load_start
    # The queue drained: none waiting at the end.
    assert mon.samples[-1]["waiting_avg"] == 0.0
    # Leave no engine behind for the next test (they drain in seconds when idle).
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, NAME
    )
    wait_until(
        lambda: not core.list_namespaced_pod(namespace, label_selector=SELECTOR).items,
        120,
        1,
        "the engine pods gone",
    )
    print(f"test took {time.monotonic() - t0:.0f}s")
