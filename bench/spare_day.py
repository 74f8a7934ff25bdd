"""A day of online load replayed over the lab's kwok GPU nodes, without and with a Spare
LLMBatchJob: the share of GPU-hours left idle (`spare_idle_gpu_share_without`, `_with`).

The day is HOURS steps of STEP_S seconds. At each step the online LLMDeployment's engine count is
set to `day_replicas(hour)`: low at night, peaking in the afternoon (the curve is below). Setting
the engine Deployment's scale directly stands in for the queue-depth HPA (measured on its own by
bench/autoscaling.py): the LLMDeployment keeps its HPA (autoscaling enabled, 1 to every GPU), but
the lab runs no prometheus-adapter, so the HPA gets no metric and leaves the scale as set, as it
would once the load settled. Every SAMPLE_S s the sampler counts the GPUs of the kwok GPU nodes
bound to engine pods, to spare shard pods, and the nodes' total; the idle share is the time
integral of idle GPUs over that of all GPUs (`idle_share`).

The second replay adds a Spare LLMBatchJob with a shard per GPU: its shards take every GPU the
engines leave, the real kube-scheduler preempts them as engines scale up, and the Job's
replacements (Pending, at the spare class) take the GPUs back as engines scale down. What this
measures is the scheduler's allocation, not compute: kwok runs no process. Two lab facts shape
it: kwok's upstream pod-complete Stage ends a Job's pod as Succeeded the moment it runs, so the
shards carry `RUNS_UNTIL_DELETED` (localcluster/kwokgate.py), which keeps them Running as a job
longer than the day would be; and kwok stops a preempted shard at once (phase Failed, exit 143),
where a real shard takes up to its grace period (bench/spare_preempt.py measures it on real
vLLM), so the seconds an engine waits for a stopping shard are not in `_with`. Nor is the model
load of a shard that starts again: a bound GPU is counted busy, not a GPU doing work.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from localcluster.claims import bound_claim, remove_claims
from localcluster.kwokgate import RUNS_UNTIL_DELETED
from localcluster.metricsstack.load import GPU, TINY_ARCHITECTURE, delete_llmd, wait_until
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL

# The lab's kwok GPU pool (dev/localcluster/profiles/default.yaml): 2 nodes of 8 H100s.
PRODUCT = "NVIDIA-H100-80GB-HBM3"
GPU_SPEC = {"count": 1, "memoryGiB": 80, "perNode": 8, "product": PRODUCT}
HOURS = 24
STEP_S = 5.0
SAMPLE_S = 1.0
ONLINE = "online"
SPARE = "spare-day"
ENGINES = f"llmfleet.dev/deployment={ONLINE},app.kubernetes.io/component=engine"
SHARDS = "llmfleet.dev/batchjob"


def day_replicas(hour: int, gpus: int) -> int:
    """Engines at `hour`: demand 0.5 - 0.35 cos(2 pi (hour - 3) / 24) of the GPUs, lowest (0.15)
    at 03:00 and highest (0.85) at 15:00, rounded, at least 1: an HPA sized for the afternoon
    leaves about half the day's GPU-hours idle."""
    demand = 0.5 - 0.35 * math.cos(2 * math.pi * (hour - 3) / 24)
    return max(1, round(demand * gpus))


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the replay began
    online: int  # GPUs bound to engine pods
    spare: int  # GPUs bound to spare shard pods
    total: int  # the GPU nodes' allocatable GPUs

    @property
    def idle(self) -> int:
        return max(0, self.total - self.online - self.spare)


def idle_share(samples: list[Sample]) -> float:
    """Idle GPU-seconds over all GPU-seconds: each sample's counts held until the next one (the
    last sample closes the replay)."""
    idle = total = 0.0
    for a, b in itertools.pairwise(samples):
        dt = b.t - a.t
        idle += a.idle * dt
        total += a.total * dt
    if total <= 0:
        raise ValueError("fewer than two samples: no time to integrate over")
    return idle / total


def gpu_nodes(core: client.CoreV1Api) -> dict[str, int]:
    nodes = core.list_node(label_selector=f"nvidia.com/gpu.product={PRODUCT}").items
    return {n.metadata.name: int((n.status.allocatable or {}).get(GPU, "0")) for n in nodes}


def _pod_gpus(pod: client.V1Pod) -> int:
    return sum(
        int(((c.resources and c.resources.limits) or {}).get(GPU, "0")) for c in pod.spec.containers
    )


def sample(core: client.CoreV1Api, ns: str, nodes: dict[str, int], t: float) -> Sample:
    """What the scheduler has bound now: a pod holds its GPUs from its binding to its end."""
    online = spare = 0
    for pod in core.list_namespaced_pod(ns).items:
        if pod.spec.node_name not in nodes or pod.status.phase in ("Succeeded", "Failed"):
            continue
        labels = pod.metadata.labels or {}
        if SHARDS in labels:
            spare += _pod_gpus(pod)
        elif labels.get("app.kubernetes.io/component") == "engine":
            online += _pod_gpus(pod)
    return Sample(t, online, spare, sum(nodes.values()))


def online_llmd(max_replicas: int) -> dict[str, Any]:
    """The tiny model on one kwok H100 per engine, at the default priority; the HPA's bounds
    span the day, and no router (it holds no GPU)."""
    spec = {
        "model": {"name": "llmfleet-test/tiny-llama", "architecture": dict(TINY_ARCHITECTURE)},
        "gpus": dict(GPU_SPEC),
        "engine": {"maxModelLen": 512},
        "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": max_replicas},
        "router": {"enabled": False},
    }
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "LLMDeployment",
        "metadata": {"name": ONLINE},
        "spec": spec,
    }


def spare_job(shards: int) -> dict[str, Any]:
    """A shard per GPU at the spare class, kept Running on kwok (RUNS_UNTIL_DELETED)."""
    spec = {
        "model": {"name": "llmfleet-test/tiny-llama", "architecture": dict(TINY_ARCHITECTURE)},
        "gpus": dict(GPU_SPEC),
        "engine": {"maxModelLen": 512, "podAnnotations": {RUNS_UNTIL_DELETED: "true"}},
        "input": {"configMap": {"name": "prompts", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "results", "path": SPARE}},
        "shards": shards,
        "priority": "Spare",
    }
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "LLMBatchJob",
        "metadata": {"name": SPARE},
        "spec": spec,
    }


def scale_online(api: client.ApiClient, ns: str, replicas: int) -> None:
    """What the HPA would write: the engine Deployment's scale."""
    apps = client.AppsV1Api(api)
    (dep,) = apps.list_namespaced_deployment(ns, label_selector=ENGINES).items
    apps.patch_namespaced_deployment_scale(dep.metadata.name, ns, {"spec": {"replicas": replicas}})


def replay(api: client.ApiClient, ns: str, nodes: dict[str, int]) -> list[Sample]:
    """The day, with the sampler running beside it; the samples."""
    core = client.CoreV1Api(api)
    samples: list[Sample] = []
    done = threading.Event()
    start = time.monotonic()

    def sampler() -> None:
        while not done.is_set():
            samples.append(sample(core, ns, nodes, time.monotonic() - start))
            done.wait(SAMPLE_S)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        for hour in range(HOURS):
            scale_online(api, ns, day_replicas(hour, sum(nodes.values())))
            time.sleep(max(0.0, start + (hour + 1) * STEP_S - time.monotonic()))
    finally:
        done.set()
        thread.join()
    samples.append(sample(core, ns, nodes, time.monotonic() - start))
    return samples


def settle(core: client.CoreV1Api, ns: str, nodes: dict[str, int], online: int, spare: int) -> None:
    def there() -> bool:
        s = sample(core, ns, nodes, 0.0)
        return s.online == online and s.spare == spare

    wait_until(there, 120, 1, f"{online} engine and {spare} spare GPUs bound")


def measure(
    api: client.ApiClient, cluster: Cluster
) -> tuple[dict[str, float], dict[str, list[Sample]]]:
    """Both replays, in a namespace of their own: the figures, and each replay's samples."""
    core = client.CoreV1Api(api)
    ns = f"bench-spare-day-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    try:
        runs = replays(api, ns)
    finally:
        core.delete_namespace(ns)
        remove_claims(api, cluster, ns)
    figures = {f"spare_idle_gpu_share_{arm}": idle_share(s) for arm, s in runs.items()}
    return figures, runs


def replays(api: client.ApiClient, ns: str) -> dict[str, list[Sample]]:
    """The day without, then with, a spare job in `ns`."""
    core = client.CoreV1Api(api)
    nodes = gpu_nodes(core)
    gpus = sum(nodes.values())
    if not gpus:
        raise RuntimeError(f"no node with {PRODUCT} GPUs: is the lab's default profile up?")
    custom = client.CustomObjectsApi(api)
    # The input must exist for the kwok gate to start the shards; no runner ever reads it.
    core.create_namespaced_config_map(
        ns,
        {
            "metadata": {"name": "prompts"},
            "data": {"in.jsonl": json.dumps({"custom_id": "r0", "body": {}}) + "\n"},
        },
    )
    # kwok mounts nothing: a claim bound to a path that need not exist.
    bound_claim(core, ns, "results", f"/nonexistent/{ns}-results")
    custom.create_namespaced_custom_object(
        API_GROUP, API_VERSION, ns, "llmdeployments", online_llmd(gpus)
    )
    wait_until(
        lambda: client.AppsV1Api(api).list_namespaced_deployment(ns, label_selector=ENGINES).items,
        60,
        1,
        "the engine Deployment",
    )
    runs: dict[str, list[Sample]] = {}
    try:
        for arm in ("without", "with"):
            first = day_replicas(0, gpus)
            scale_online(api, ns, first)
            if arm == "with":
                custom.create_namespaced_custom_object(
                    API_GROUP, API_VERSION, ns, BATCH_PLURAL, spare_job(gpus)
                )
            settle(core, ns, nodes, first, gpus - first if arm == "with" else 0)
            runs[arm] = replay(api, ns, nodes)
            print(f"   {arm} a spare job: idle share {idle_share(runs[arm]):.3f}")
        custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, BATCH_PLURAL, SPARE)
    finally:
        delete_llmd(api, ns, ONLINE)
    return runs
