"""LLMBatchJob end to end on the local cluster: the operator (as the chart's ServiceAccount) runs
an Indexed Job whose pods run the batch runner with the real vLLM CPU engine on the node runner's
`local-gpu-0`; claims are directories under `<state dir>/pvcs/` (docs/cpu-adaptations.md).

One job does the heavy lifting (two engines at once, one shard killed midway and restarted);
the other tests start no engine. (What needs the API server alone: tests/api/test_batchjob.py.)
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from localcluster.claims import claim
from localcluster.metricsstack.load import PRODUCT
from localcluster.noderunner import procs
from localcluster.supervisor import Cluster
from manifests import batch_job, cond, create, events, status

from . import localnode
from .batchdata import answered, input_claim, records, request_line, shard_pod
from .harness import Operator, utcnow, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the node runner (its shards run as local processes) and the audit log"),
]

NODE = "local-gpu-0"
LINES = 300
MALFORMED = {7: "{not json", 58: None, 123: None, 200: None, 299: None}


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=4) as node:
        yield node


def malformed_line(i: int) -> str:
    shapes = {
        58: {"custom_id": "bad-url", "method": "POST", "url": "/v1/embeddings", "body": {}},
        123: {"custom_id": "no-body", "method": "POST", "url": "/v1/completions"},
        200: {
            "custom_id": "req-1",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"prompt": "duplicate"},
        },
        299: {"method": "POST", "url": "/v1/completions", "body": {"prompt": "no id"}},
    }
    return MALFORMED[i] or json.dumps(shapes[i])


def test_a_300_line_job_over_two_shards_answers_every_line_exactly_once_through_a_shard_kill(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    node_runner: str,
    namespace: str,
    volumes: None,
) -> None:
    started = time.monotonic()
    lines = [malformed_line(i) if i in MALFORMED else request_line(i) for i in range(1, LINES + 1)]
    data = input_claim(api, cluster, namespace, lines)
    create(api, namespace, batch_job("big", shards=2, defaults={"temperature": 0.8}))

    # Shard 0 is killed (every process, as by the OOM killer) once it has written 20 records.
    output = data / "out" / "big" / "shard-00000-of-00002.jsonl"
    wait_until(
        lambda: output.exists() and len(output.read_bytes().splitlines()) >= 20,
        timeout=300,
        interval=0.2,
        what="shard 0 midway",
    )
    pod = shard_pod(api, namespace, 0)
    assert pod is not None
    runner = procs.runner_id(NODE, cluster.state_dir)
    pids = [p for p in procs.find(procs.marker(runner, pod.metadata.uid)) if procs.alive(p)]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    written_before_kill = len(output.read_bytes().splitlines())
    assert written_before_kill < LINES // 2, "the kill came too late to interrupt the shard"

    def complete() -> dict[str, Any] | None:
        st = status(api, namespace, "big")
        assert cond(st, "Failed").get("status") != "True", st
        return st if st.get("phase") == "Complete" else None

    st = wait_until(complete, timeout=400, interval=1, what="job Complete")

    found = records(data / "out" / "big")
    assert len(found) == LINES
    ids = answered(found)
    assert set(ids.values()) == {1}
    valid = {f"req-{i}" for i in range(1, LINES + 1) if i not in MALFORMED}
    assert set(ids) == valid
    errors = {r["error"]["line"]: r["error"]["message"] for r in found if r["error"]}
    assert sorted(errors) == sorted(MALFORMED)
    for line, message in errors.items():
        assert message.startswith(f"line {line}: ")
    assert "duplicate custom_id 'req-1'" in errors[200]
    body = next(r for r in found if r["custom_id"] == "req-1")["response"]["body"]
    assert body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 18  # ignore_eos: exactly max_tokens

    assert (st["total"], st["succeeded"], st["failed"]) == (LINES, LINES - 5, 5)
    assert st["progress"] == f"{LINES}/{LINES} (100%)"
    assert cond(st, "Complete")["status"] == "True"
    shard0 = next(s for s in st["shardStatus"] if s["index"] == 0)
    assert shard0["restarts"] >= 1
    table = cluster.kubectl("get", "llmbj", "big", "-n", namespace)
    assert "Complete" in table
    assert f"{LINES}/{LINES}" in table
    assert [e.reason for e in events(api, namespace, "big") if e.reason == "Complete"]
    print(f"300-line job with a kill: {time.monotonic() - started:.0f}s")


def test_an_output_directory_of_another_job_fails_the_job_with_the_runners_message(
    api: client.ApiClient,
    cluster: Cluster,
    operator: Operator,
    node_runner: str,
    namespace: str,
    volumes: None,
) -> None:
    data = claim(api, cluster, namespace, "data")
    taken = data / "out" / "taken"
    taken.mkdir(parents=True)
    (taken / ".llmfleet-job.json").write_text('{"job": "elsewhere/other", "shards": 1}\n')
    client.CoreV1Api(api).create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "prompts"}, "data": {"in.jsonl": request_line(1) + "\n"}},
    )
    body = batch_job(
        "taken",
        shards=1,
        gpus={"count": 1, "memoryGiB": 16, "product": PRODUCT},
        input={"configMap": {"name": "prompts", "key": "in.jsonl"}},
    )
    create(api, namespace, body)
    st = wait_until(
        lambda: (s := status(api, namespace, "taken")).get("phase") == "Failed" and s,
        timeout=120,
        what="job Failed",
    )
    message = cond(st, "Failed")["message"]
    assert "belongs to job 'elsewhere/other'" in message
    assert [e for e in events(api, namespace, "taken") if e.reason == "Failed"]
    assert not list(taken.glob("shard-*"))


IDLE_WINDOW = 21.0  # two polls of running jobs (every 10 s) and a bit


def quiet_for(operator: Operator, namespace: str, seconds: float) -> bool:
    since = utcnow()
    time.sleep(seconds)
    return not operator.writes_since(since, namespace)


def test_a_job_whose_pods_never_run_writes_nothing_while_idle_and_lets_its_namespace_go(
    api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    gpus = {"count": 1, "memoryGiB": 16, "product": "NoSuchGPU"}  # its pods find no node
    create(api, namespace, batch_job("stuck", gpus=gpus))
    wait_until(
        lambda: status(api, namespace, "stuck").get("shardStatus"), what="the shards in status"
    )
    time.sleep(3)  # the pods' scheduling attempts settle
    since = utcnow()
    time.sleep(IDLE_WINDOW)
    assert [w["requestURI"] for w in operator.writes_since(since, namespace)] == []

    # A finalizer holds the namespace in Terminating, as a pod on a lost node would.
    core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "hold", "finalizers": ["llmfleet.dev/test-hold"]}},
    )
    core.delete_namespace(namespace)
    try:
        wait_until(
            lambda: core.read_namespace(namespace).status.phase == "Terminating",
            what="the namespace terminating",
        )
        # Its Job and pod go, which status reports once; wait for that.
        wait_until(
            lambda: all(
                p.status.phase in ("Failed", "Succeeded")
                for p in core.list_namespaced_pod(namespace).items
            ),
            timeout=90,
            what="the namespace's pods ended",
        )
        wait_until(
            lambda: quiet_for(operator, namespace, 11.0), timeout=90, what="a poll without writes"
        )
        since = utcnow()
        time.sleep(IDLE_WINDOW)
        writes = operator.writes_since(since, namespace)
        assert [(w["verb"], w["requestURI"]) for w in writes] == []
    finally:
        core.patch_namespaced_config_map("hold", namespace, {"metadata": {"finalizers": None}})
    # Once nothing else holds it, the namespace goes: the pods that never ran do not keep it.
    wait_until(
        lambda: namespace not in {n.metadata.name for n in core.list_namespace().items},
        timeout=60,
        what="the namespace gone",
    )
