"""Batch on spare GPUs end to end (issue 33, docs/batch.md "Batch on spare GPUs"): a Spare
LLMBatchJob of two shards (real vLLM offline engines) beside an online LLMDeployment (the engine
stand-in: the test is about the HPA, the scheduler, the runner and the operator, not vLLM
serving) on the node runner's `local-gpu-0`, two GPU slots. The online engine holds one slot; the
job takes the other, every free GPU and no more: its second shard waits Pending. A surge of
requests at the online engine builds its queue, the real HPA (through Prometheus and
prometheus-adapter) scales the LLMDeployment to 2, and the real kube-scheduler preempts the
spare shard for the new engine's pod. The node runner stops the shard as a kubelet would
(SIGTERM, the pod's grace period), the runner writes what it was running and exits, and the new
engine becomes Ready on that GPU. The job says Preempted, by whom. Once the surge is over the
HPA scales back to 1, the job takes the freed GPU back (its shards one after the other on the
one spare slot: the shard count is fixed), says Resumed, completes, and its output answers every
line exactly once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import (
    PRODUCT,
    EngineLoad,
    delete_llmd,
    free_gpus,
    pod_ready,
    tiny_llmd,
    wait_free_gpus,
)
from localcluster.supervisor import Cluster
from manifests import batch_job, cond, create, events, status

from . import localnode
from .batchdata import answered, input_claim, records, request_line, shard_pod
from .harness import Operator, condition, get_llmd, stand_in, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (spare shards and the online engines as local processes)"),
]

NODE = "local-gpu-0"
# GPU slots of the node: one for the online engine, one spare, which the surge's second engine
# takes. Two: a second vLLM loading beside the first on the 2 shared cores costs more time than
# it shows, so the job's shards share the one spare slot, one after the other.
SLOTS = 2
SHARDS = 2
JOB = "nightly"
ONLINE = "online"
ENGINES = f"llmfleet.dev/deployment={ONLINE},app.kubernetes.io/component=engine"
SHARD_PODS = "llmfleet.dev/batchjob"
# Enough for the running shard to be busy while the surge builds the queue, the HPA reacts and
# the scheduler preempts it (a few seconds after the steady traffic, up to 10): half the lines
# each, some 20 s of a shard's work here.
LINES = 800
# Lines a shard's engine runs at once: the rest wait in its queue, and a preempted shard hands
# them back unstarted, so its replacement has lines left to resume.
MAX_NUM_SEQS = 4
# The shards' grace period: the preempting engine waits at most this long for its GPU.
GRACE = 20
SPARE_CLASS = "llmfleet-spare"  # the chart's priorityClasses.spare.name
# The online engines: 2 requests running each, the rest queued; the HPA adds a pod while more
# than TARGET_QUEUE_DEPTH wait per pod (averaged over 30 s, docs/autoscaling.md). The surge's
# SURGE clients keep 6 waiting on one engine; each request is SURGE_TOKENS stand-in steps of
# TOKEN_SECONDS (2 s).
ONLINE_MAX_NUM_SEQS = 2
TARGET_QUEUE_DEPTH = 1
SURGE = 8
STEADY = ONLINE_MAX_NUM_SEQS + 1  # of the SURGE, the clients before it
SURGE_TOKENS = 200
TOKEN_SECONDS = 0.01
# How long the queue must stay low before the HPA removes the surge's pod (default 300 s).
SCALE_DOWN_SECONDS = 5


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster) -> Iterator[str]:
    # Exactly SLOTS: the job must hold every free GPU of the node for the surge to need one.
    with localnode.local_node(cluster, gpus=SLOTS, exactly=True) as node:
        yield node


def online_llmd() -> dict[str, Any]:
    """One engine on one GPU of local-gpu-0, at the default priority (above the spare class),
    up to two under a queue."""
    body = tiny_llmd(
        ONLINE,
        max_num_seqs=ONLINE_MAX_NUM_SEQS,
        minReplicas=1,
        maxReplicas=2,
        targetQueueDepth=TARGET_QUEUE_DEPTH,
        scaleDownStabilizationSeconds=SCALE_DOWN_SECONDS,
    )
    return stand_in(body, token_seconds=TOKEN_SECONDS)


def written(directory: Any, index: int) -> int:
    path = directory / f"shard-{index:05d}-of-{SHARDS:05d}.jsonl"
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def pod_or_none(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def engines(core: client.CoreV1Api, ns: str) -> list[client.V1Pod]:
    """The online engine pods not being deleted."""
    pods = core.list_namespaced_pod(ns, label_selector=ENGINES).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def hpa(api: client.ApiClient, ns: str) -> client.V2HorizontalPodAutoscaler:
    return client.AutoscalingV2Api(api).read_namespaced_horizontal_pod_autoscaler(ONLINE, ns)


def test_a_surge_scales_online_into_a_spare_gpu_and_the_job_grows_back_answering_once(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    metrics_stack: MetricsStack,
    node_runner: str,
    vllm_python: Path,
    namespace: str,
    volumes: None,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    core = client.CoreV1Api(api)
    wait_free_gpus(core, NODE, SLOTS)  # (pods of an earlier module may still be draining)
    # The online LLMDeployment first: one engine on one GPU of the node (it starts while the
    # job's input claim binds).
    create(api, namespace, online_llmd())
    data = input_claim(api, cluster, namespace, [request_line(i) for i in range(1, LINES + 1)])
    output = data / "out" / JOB
    (first,) = wait_until(
        lambda: [p for p in engines(core, namespace) if p.spec.node_name],
        timeout=60,
        what="the online engine bound to a node",
    )
    assert first.spec.node_name == NODE
    wait_until(
        lambda: condition(get_llmd(api, namespace, ONLINE), "Available").get("status") == "True",
        timeout=90,
        what="the online LLMDeployment Available",
    )
    # Before the job: its shard must still be busy when the surge comes.
    wait_until(
        lambda: any(
            c.type == "ScalingActive" and c.status == "True"
            for c in hpa(api, namespace).status.conditions or []
        ),
        timeout=60,
        interval=1,
        what="the HPA reading the engines' queue (ScalingActive)",
    )

    with EngineLoad(api, namespace, ENGINES, vllm_python, tmp_path / "load") as load:
        # Steady online traffic: at most one request waits, the target, so the HPA keeps one
        # engine. The surge's clients start now too, on no engine until the surge (a client
        # takes seconds to start on 2 busy cores, and the HPA's 30 s average starts from 1).
        steady = load.start("steady", STEADY, duration=600, max_tokens=SURGE_TOKENS)
        nowhere = tmp_path / "surge-targets.json"
        nowhere.write_text(json.dumps({"pods": []}))
        surge = load.start(
            "surge", SURGE - STEADY, duration=600, max_tokens=SURGE_TOKENS, targets=nowhere
        )

        # The Spare job takes every free GPU and no more: one shard runs, the other waits Pending.
        body = batch_job(
            JOB,
            shards=SHARDS,
            gpus={"count": SHARDS, "memoryGiB": 16, "perNode": 4, "product": PRODUCT},
            engine={"maxModelLen": 512, "maxNumSeqs": MAX_NUM_SEQS},
            priority="Spare",
            terminationGracePeriodSeconds=GRACE,
        )
        create(api, namespace, body)
        index = (
            wait_until(
                lambda: next((i + 1 for i in range(SHARDS) if written(output, i) >= 1), None),
                timeout=240,
                interval=0.5,
                what="a shard answering",
            )
            - 1
        )
        running = shard_pod(api, namespace, index)
        assert running is not None
        assert running.spec.priority_class_name == SPARE_CLASS
        assert running.spec.node_name == NODE
        (waiting,) = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector=SHARD_PODS).items
            if p.metadata.uid != running.metadata.uid
        ]
        assert waiting.status.phase == "Pending", waiting.status
        assert not waiting.spec.node_name, waiting.status
        assert free_gpus(core, NODE) == 0
        assert [p.metadata.name for p in engines(core, namespace)] == [first.metadata.name]
        assert hpa(api, namespace).status.desired_replicas == 1

        # The surge: the queue builds on the one engine and the HPA (not the test) wants two.
        # Its clients now follow the Ready engines as the steady ones do.
        (link := tmp_path / "surge-targets.link").symlink_to(load.targets)
        link.replace(nowhere)
        asked = time.monotonic()
        wait_until(
            lambda: hpa(api, namespace).status.desired_replicas == 2,
            timeout=90,
            interval=1,
            what="the HPA scaling the online LLMDeployment to 2",
        )
        scaled = time.monotonic() - asked

        # No GPU is free: the scheduler preempts the shard, which stops within its grace period.
        def preempted() -> tuple[client.V1Pod, float] | None:
            now = pod_or_none(core, namespace, running.metadata.name)
            assert now is None or now.status.phase != "Succeeded", "the shard ended unpreempted"
            if now is not None and now.metadata.deletion_timestamp is not None:
                return now, time.monotonic()
            return None

        victim, deleting = wait_until(
            preempted, timeout=60, interval=0.2, what="the shard preempted"
        )
        # What the victim held at least: from its start to the scheduler's deletion.
        victim_held = (
            victim.metadata.deletion_timestamp - victim.status.start_time
        ).total_seconds()

        def ended() -> tuple[client.V1Pod | None] | None:
            pod = pod_or_none(core, namespace, victim.metadata.name)
            return (pod,) if pod is None or pod.status.phase in ("Failed", "Succeeded") else None

        # The pod object may outlive its processes a while (the Job's tracking finalizer).
        (last,) = wait_until(ended, timeout=GRACE + 15, interval=0.2, what="the shard ended")
        stopped = time.monotonic() - deleting
        # Before the grace period is out: the runner exited on its own, no SIGKILL came.
        assert stopped < GRACE, f"the preempted shard took {stopped:.1f}s to stop (grace {GRACE}s)"
        if last is not None:  # caught before Kubernetes deleted it: the runner's own exit code
            (runner,) = last.status.container_statuses
            assert runner.state.terminated.exit_code == 143, runner.state.terminated
        done = written(output, index)
        assert done < LINES // SHARDS, "the shard finished before its preemption"

        # The surge's engine runs on the shard's GPU, Ready.
        def second_ready() -> client.V1Pod | None:
            new = [p for p in engines(core, namespace) if p.metadata.uid != first.metadata.uid]
            return new[0] if new and pod_ready(new[0]) else None

        engine = wait_until(second_ready, timeout=90, interval=0.5, what="the second engine Ready")
        ready = time.monotonic() - asked
        assert engine.spec.node_name == NODE
        assert pod_or_none(core, namespace, first.metadata.name) is not None  # online kept its own

        def says_preempted() -> dict[str, Any] | None:
            st = status(api, namespace, JOB)
            return st if cond(st, "Preempted").get("status") == "True" else None

        st = wait_until(says_preempted, timeout=30, what="the job Preempted")
        assert st["phase"] == "Preempted"
        assert st["preemptions"] == 1
        by = f"pod {namespace}/{engine.metadata.name} on node {NODE}"
        assert cond(st, "Preempted")["message"].startswith(
            f"1 of {SHARDS} shard(s) preempted: shard {index} by {by};"
        ), cond(st, "Preempted")
        # The kubelet deletes the victim's pod once it stopped: status still knows who did it.
        assert st["shardStatus"][index]["preemptedBy"] == by
        assert "Preempted" in {e.reason for e in events(api, namespace, JOB)}

        # The surge is over: the HPA scales back to 1 after its scale-down window.
        for clients in (steady, surge):
            clients.ask_to_stop()
        calm = time.monotonic()
    served = steady.records() + surge.records()
    assert surge.records()
    assert not [r for r in served if r["outcome"] == "error"], served[:5]
    wait_until(
        lambda: (
            hpa(api, namespace).status.desired_replicas == 1 and len(engines(core, namespace)) == 1
        ),
        timeout=120,
        interval=1,
        what="the HPA scaling the online LLMDeployment back to 1",
    )
    scaled_down = time.monotonic() - calm

    # The freed GPU goes back to the job: the preempted shard runs again (Resumed), on the one
    # spare slot before or after the other shard.
    def resumed() -> dict[str, Any] | None:
        st = status(api, namespace, JOB)
        assert st.get("phase") != "Complete", "the job completed before it was seen resumed"
        ok = st.get("phase") == "Running" and cond(st, "Preempted").get("reason") == "Resumed"
        return st if ok else None

    wait_until(resumed, timeout=360, interval=0.5, what="the job Running again, Resumed")

    def complete() -> dict[str, Any] | None:
        st = status(api, namespace, JOB)
        assert cond(st, "Failed").get("status") != "True", st
        return st if st.get("phase") == "Complete" else None

    st = wait_until(complete, timeout=360, interval=1, what="the job Complete")

    found = records(output)
    ids = answered(found)
    assert len(found) == LINES
    assert set(ids.values()) == {1}
    assert set(ids) == {f"req-{i}" for i in range(1, LINES + 1)}
    assert (st["succeeded"], st["failed"], st["preemptions"]) == (LINES, 0, 1)
    # The graceful stop wrote every line it was running: nothing ran twice.
    assert st["linesRedone"] == 0
    # A preemption is no failure: no shard used up a restart.
    assert [s["restarts"] for s in st["shardStatus"]] == [0] * SHARDS
    reasons = [e.reason for e in events(api, namespace, JOB)]
    assert {"Preempted", "Resumed", "Complete"} <= set(reasons), reasons
    # What the dashboard's "Batch on spare GPUs" row reads, from the operator's /metrics.
    spare = {"namespace": namespace, "priority": "Spare"}
    assert operator.metric("llmfleet_batch_preemptions_total", **spare) == 1
    assert operator.metric("llmfleet_batch_lines_redone_total", **spare) == 0
    assert operator.metric("llmfleet_batch_gpu_seconds_total", **spare) == st["gpuSeconds"]
    # gpuSeconds still counts the victim, which Kubernetes deleted once it stopped; what it held
    # while stopping is missed when the pod is gone before the operator reads its end (at most
    # the grace period; docs/batch.md).
    pods = core.list_namespaced_pod(namespace, label_selector=SHARD_PODS).items
    finished = sum(
        (c.state.terminated.finished_at - p.status.start_time).total_seconds()
        for p in pods
        if p.metadata.uid != victim.metadata.uid
        for c in p.status.container_statuses or []
        if c.state.terminated is not None
    )
    floor = victim_held + finished - GRACE
    assert st["gpuSeconds"] >= floor, (st["gpuSeconds"], victim_held, finished)
    # Online serving goes on; its engine and router leave before the next module (the namespace
    # controller would wait out their grace periods).
    delete_llmd(api, namespace, ONLINE)
    print(
        f"spare batch: HPA wanted 2 engines {scaled:.1f}s into the surge, the shard stopped "
        f"{stopped:.1f}s after its deletion ({done} of {LINES // SHARDS} lines written), the "
        f"new engine Ready {ready:.1f}s into the surge, back to 1 engine {scaled_down:.1f}s "
        f"after it, test {time.monotonic() - started:.0f}s"
    )
