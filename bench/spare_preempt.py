"""How long an online engine waits for a GPU a Spare LLMBatchJob's shard holds
(`spare_preempt_s`), on the node runner's `local-gpu-0` with one GPU slot, the shard as
tests/e2e/test_spare_batch.py's: it runs a real vLLM offline engine (the tiny
model on the CPU), the online LLMDeployment's engine is the engine stand-in (it starts in about a
second: what is timed is the scheduler, the runner's stop and the node runner, not vLLM serving).

Each run: the spare job starts, and once its shard has written a line (its engine loaded and
answering) the online LLMDeployment is created. Times are taken from a pod watch, each event
stamped with the monotonic clock as it arrives (creationTimestamp has 1 s resolution):

* t0, the decision: the online engine pod first seen (created by its ReplicaSet, as it is when
  the HPA raises the scale);
* `spare_preempt_s`: t0 to the engine pod bound to the node, which the scheduler does only once
  the preempted shard's pod has stopped: the GPU is the engine's from then. Goal: at most the
  grace period + 10 s. Median of RUNS, and the worst (`spare_preempt_max_s`);
* `spare_shard_stop_s`: the scheduler's deletion of the shard pod (its deletionTimestamp seen) to
  the pod stopped, phase Failed (the runner's graceful stop: unstarted lines handed back, running
  ones written, exit 143). The pod object stays a few seconds more, until the Job controller
  drops its tracking finalizer, but the scheduler counts a stopped pod's GPU free;
* `spare_online_ready_s`: t0 to the engine pod Ready.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from localcluster.claims import claim, remove_claims
from localcluster.metricsstack.load import (
    PRODUCT,
    hold_gpus,
    tiny_llmd,
    wait_free_gpus,
    wait_until,
)
from localcluster.noderunner import adaptations
from localcluster.supervisor import Cluster

from llmfleet import API_GROUP, API_VERSION
from llmfleet.models.batchjob import PLURAL as BATCH_PLURAL
from llmfleet.models.deployment import PLURAL as LLMD_PLURAL

RUNS = 3
GRACE = 20  # the shard's terminationGracePeriodSeconds
# Far more than the shard answers before it is preempted (about 20 lines/s here).
LINES = 600
MAX_NUM_SEQS = 4  # as the e2e test: the rest of the shard's queue is handed back unstarted
ONLINE = "online"
ENGINES = f"llmfleet.dev/deployment={ONLINE},app.kubernetes.io/component=engine"
SHARDS = "llmfleet.dev/batchjob"


def request_line(i: int) -> str:
    body = {
        "prompt": f"Request {i}: once upon a time",
        "max_tokens": 16 + (i % 8) * 16,
        "ignore_eos": True,
    }
    return json.dumps(
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}
    )


def spare_job(name: str) -> dict[str, Any]:
    spec = {
        "model": dict(tiny_llmd("x")["spec"]["model"]),
        "gpus": {"count": 1, "memoryGiB": 16, "perNode": 4, "product": PRODUCT},
        "engine": {"maxModelLen": 512, "maxNumSeqs": MAX_NUM_SEQS},
        "input": {"persistentVolumeClaim": {"claimName": "data", "path": "in/prompts.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "data", "path": f"out/{name}"}},
        "shards": 1,
        "priority": "Spare",
        "terminationGracePeriodSeconds": GRACE,
    }
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "LLMBatchJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def online_llmd() -> dict[str, Any]:
    """One engine on local-gpu-0's GPU at the default priority, served by the stand-in."""
    body: dict[str, Any] = tiny_llmd(ONLINE, enabled=False)
    annotations = {adaptations.STAND_IN_ANNOTATION: adaptations.STAND_IN}
    body["spec"]["engine"]["podAnnotations"] = annotations
    return body


@dataclass
class Seen:
    """The first monotonic time each moment was seen in the pod watch."""

    times: dict[str, float] = field(default_factory=dict)

    def mark(self, what: str) -> None:
        self.times.setdefault(what, time.monotonic())

    def pod_event(self, kind: str, pod: client.V1Pod) -> None:
        labels = pod.metadata.labels or {}
        if labels.get("llmfleet.dev/deployment") == ONLINE:
            if labels.get("app.kubernetes.io/component") != "engine":
                return
            self.mark("created")
            if pod.spec.node_name:
                self.mark("bound")
            conditions = pod.status.conditions or []
            if any(c.type == "Ready" and c.status == "True" for c in conditions):
                self.mark("ready")
        elif SHARDS in labels and "created" in self.times:
            if pod.metadata.deletion_timestamp is not None:
                self.mark("shard_deleting")
            # Its process ended (the node runner reports the phase as a kubelet does): the
            # scheduler counts a terminal pod's GPU free, though the object stays until the
            # Job controller drops its tracking finalizer.
            stopped = pod.status.phase in ("Failed", "Succeeded")
            if "shard_deleting" in self.times and (stopped or kind == "DELETED"):
                self.mark("shard_stopped")


def watch_pods(core: client.CoreV1Api, ns: str, seen: Seen, stop: threading.Event) -> None:
    """One long watch: a new one lists afresh and would miss a deletion between the two."""
    while not stop.is_set():
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_pod, ns, timeout_seconds=600):
            seen.pod_event(event["type"], event["object"])
            if stop.is_set():
                w.stop()


def written(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def one_run(api: client.ApiClient, ns: str, data: Path, node: str, i: int) -> dict[str, float]:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    job = f"spare-{i}"
    custom.create_namespaced_custom_object(API_GROUP, API_VERSION, ns, BATCH_PLURAL, spare_job(job))
    shard = data / "out" / job / "shard-00000-of-00001.jsonl"
    # Past the model's load: the engine answers lines.
    wait_until(lambda: written(shard) >= 1, 400, 0.5, "the spare shard answering")
    seen, stop = Seen(), threading.Event()
    watcher = threading.Thread(target=watch_pods, args=(core, ns, seen, stop), daemon=True)
    watcher.start()
    time.sleep(1)  # the watch open before the engine pod can appear
    try:
        custom.create_namespaced_custom_object(
            API_GROUP, API_VERSION, ns, LLMD_PLURAL, online_llmd()
        )
        wait_until(lambda: "ready" in seen.times, GRACE + 120, 0.2, "the online engine Ready")
        wait_until(lambda: "shard_stopped" in seen.times, 30, 0.2, "the preempted shard stopped")
    finally:
        stop.set()
        watcher.join(timeout=10)
    if written(shard) >= LINES:
        raise RuntimeError("the shard finished before it was preempted: raise LINES")
    t = seen.times
    out = {
        "preempt": t["bound"] - t["created"],
        "stop": t["shard_stopped"] - t["shard_deleting"],
        "ready": t["ready"] - t["created"],
    }
    print(
        f"   run {i}: engine bound {out['preempt']:.1f}s after it was created (shard stopped in "
        f"{out['stop']:.1f}s), Ready after {out['ready']:.1f}s"
    )
    custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, LLMD_PLURAL, ONLINE)
    custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, ns, BATCH_PLURAL, job)
    wait_until(lambda: not core.list_namespaced_pod(ns).items, 150, 1, "run's pods gone")
    wait_free_gpus(core, node, 1)
    return out


def measure(api: client.ApiClient, cluster: Cluster) -> dict[str, float]:
    """RUNS runs on the node runner (started with one GPU slot unless one runs), in a namespace
    of their own."""
    core = client.CoreV1Api(api)
    was_running = cluster.alive("node-runner")
    node = cluster.start_node_runner(gpus=1)
    ns = f"bench-spare-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    runs: list[dict[str, float]] = []
    try:
        free = wait_free_gpus(core, node, 1)
        if free > 1:  # a runner someone else started with more slots: the shard must fill it
            hold_gpus(core, ns, free - 1)
        data = claim(api, cluster, ns, "data")
        (data / "in").mkdir()
        lines = [request_line(i) for i in range(LINES)]
        (data / "in" / "prompts.jsonl").write_text("\n".join(lines) + "\n")
        for i in range(RUNS):
            runs.append(one_run(api, ns, data, node, i))
    finally:
        core.delete_namespace(ns)
        # The node runner, its kubelet, ends the pods: it stops only once they are gone.
        wait_until(lambda: not core.list_namespaced_pod(ns).items, 150, 1, f"{ns}'s pods gone")
        remove_claims(api, cluster, ns)
        if not was_running:
            cluster.stop_node_runner()
    preempt = [r["preempt"] for r in runs]
    return {
        "spare_preempt_s": statistics.median(preempt),
        "spare_preempt_max_s": max(preempt),
        "spare_shard_stop_s": statistics.median(r["stop"] for r in runs),
        "spare_online_ready_s": statistics.median(r["ready"] for r in runs),
    }
