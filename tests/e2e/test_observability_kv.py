"""A vLLM engine whose KV cache is too small for its batch: KV cache usage pinned near 100 % and
requests preempted; LLMFleetKVCacheNearlyFull and LLMFleetHighPreemptionRate seen firing in the
tests' Prometheus (rules loaded with `for` set to 0, expressions unchanged), and the dashboard
panels showing the same.

Real vLLM on purpose (no engine stand-in): the cache filling up and the preemptions are vLLM's
own block accounting under pressure, which the contract test does not hold the stand-in to
(tests/README.md, "Real vLLM or the stand-in").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import (
    EngineLoad,
    delete_llmd,
    pod_ready,
    tiny_llmd,
    wait_free_gpus,
    wait_until,
)
from localcluster.metricsstack.scrape_config import OPERATOR_JOB
from localcluster.supervisor import Cluster

from e2e import localnode, observe
from e2e.harness import Operator

pytestmark = [pytest.mark.cluster, pytest.mark.lab("the node runner and the lab's metrics stack")]

STARTUP_TIMEOUT = 300
# vLLM's CPU attention wants blocks of a multiple of 32 tokens: 41 blocks (one is vLLM's null
# block) hold 1,280 tokens, enough for one sequence of maxModelLen 512 (vLLM refuses less) but
# not for eight of up to ~410 tokens; fine enough that a full cache reads above 95 %.
KV_ARGS = ["--block-size", "32", "--num-gpu-blocks-override", "41"]
CLIENTS = 8


@pytest.fixture(scope="module")
def rules(metrics_stack: MetricsStack, operator: Operator) -> MetricsStack:
    metrics_stack.scrape(OPERATOR_JOB, operator.metrics_target)
    observe.load_alert_rules(metrics_stack)
    return metrics_stack


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=2) as node:
        yield node


def test_a_kv_cache_too_small_for_the_batch_fills_up_preempts_and_alerts(
    cluster: Cluster,
    api: client.ApiClient,
    namespace: str,
    rules: MetricsStack,
    node_runner: str,
    vllm_python: Path,
    tmp_path: Path,
) -> None:
    name = "small-kv"
    core = client.CoreV1Api(api)
    wait_free_gpus(core, node_runner, 1)
    body = tiny_llmd(name, max_num_seqs=CLIENTS, enabled=False)
    body["spec"]["engine"]["extraArgs"] = KV_ARGS
    body["spec"]["router"] = {"enabled": False}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
    selector = f"llmfleet.dev/deployment={name},app.kubernetes.io/component=engine"
    wait_until(
        lambda: any(
            pod_ready(p) for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        ),
        STARTUP_TIMEOUT,
        1,
        "the engine Ready",
    )
    with EngineLoad(api, namespace, selector, vllm_python, tmp_path / "load") as load:
        started = time.time()
        gen = load.start("long", CLIENTS, duration=240, max_tokens=400, timeout=180)
        wanted = {"LLMFleetKVCacheNearlyFull", "LLMFleetHighPreemptionRate"}
        seen: set[str] = set()

        def fired() -> bool:
            seen.update(observe.fired_since(rules, namespace, name, started) & wanted)
            return seen == wanted

        wait_until(fired, 180, 1, f"{sorted(wanted)} firing (so far {sorted(seen)})")
        # The dashboard shows the same: the cache full, requests preempted. Asked again for a few
        # scrapes: the sample that fired the alert can be newer than the last point of a range
        # query ending now.
        for title, above in (("KV cache usage", 0.95), ("Preemptions", 0.0)):
            wait_until(
                lambda t=title, a=above: observe.panel_peak(rules, t, namespace, name, started) > a,
                20,
                2,
                f"the {title!r} panel above {above}",
            )
        gen.stop()
    records = gen.records()
    # Preemption slows requests down; it loses none.
    assert records
    lost = [r for r in records if r["outcome"] != "ok"]
    assert not lost, f"{len(lost)} of {len(records)} requests failed: {lost[:3]}"
    delete_llmd(api, namespace, name)
