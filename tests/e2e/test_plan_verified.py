"""PlanVerified against the engines' own figures: the operator reads `vllm:cache_config_info` from
each ready engine's /metrics and compares the KV cache the engine allocated with the plan's
`kvCacheTokensPerReplica`.

On the local cluster's emulated GPU node (docs/cpu-adaptations.md) vLLM runs on the CPU, where
the KV cache is not what is left of a GPU's memory but `VLLM_CPU_KVCACHE_SPACE` GiB, which the
node runner sets to 1 GiB (adaptation 9; a pod's own value would be kept, but the operator sets
none on GPU pods). So:

- **Matching plan.** The emulated GPU is described truthfully: `spec.gpus.memoryGiB` is chosen
  (with the operator's own planner, offline) so that after gpuMemoryUtilization, the weights and
  the activation reserve the planner leaves exactly the 1 GiB of KV cache the engine gets, about
  2.1 M tokens of the tiny model (0.5 KiB per token).
- **Differing engine.** The same spec, so the same plan, plus `engine.extraArgs: --block-size 32
  --num-gpu-blocks-override 41`: vLLM allocates 41 blocks of 32 tokens whatever memory it has,
  and the planner does not read either flag (only the numeric overrides of --max-model-len,
  --gpu-memory-utilization, --max-num-seqs and --max-num-batched-tokens). The engine holds about
  1.3 k tokens against the plan's 2.1 M: PlanVerified=False and one Warning Event PlanNotVerified.

The matching engine is real vLLM. The differing one is the engine stand-in
(dev/localcluster/standin, docs/cpu-adaptations.md item 20), which allocates its cache as the CPU
build does (tests/e2e/test_engine_standin_contract.py holds it to vLLM's figures): what that test
checks is the operator's reporting (condition, message, one Event, no writes on idle resyncs),
not vLLM, and the stand-in is up in seconds, so it runs while the real engine starts. Both
engines start together (one GPU slot each); the figures are read once per pod and cached by its
uid.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.metricsstack.load import (
    delete_llmd,
    tiny_llmd,
    wait_free_gpus,
    wait_until,
)
from localcluster.noderunner.adaptations import DEFAULT_KVCACHE_GIB
from localcluster.promtext import scrape
from localcluster.supervisor import Cluster

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan

from . import localnode
from .harness import Operator, condition, get_llmd, stand_in, utcnow

pytestmark = [pytest.mark.cluster, pytest.mark.lab("the node runner's vLLM engines")]

STARTUP_TIMEOUT = 300  # a vLLM engine (and the stand-in) starting on 2 shared cores
GIB = 1024**3
MATCH, DIFFER = "kv-as-planned", "kv-overridden"
OVERRIDE_ARGS = ["--block-size", "32", "--num-gpu-blocks-override", "41"]
ENGINES = "app.kubernetes.io/component=engine"


@dataclass(frozen=True)
class Fleet:
    namespaces: dict[str, str]  # LLMDeployment -> its namespace
    emulated_kv_tokens: int  # what VLLM_CPU_KVCACHE_SPACE holds of the tiny model


def kv_bytes_per_token(body: dict[str, Any]) -> int:
    arch = body["spec"]["model"]["architecture"]
    return 2 * arch["numLayers"] * arch["numKeyValueHeads"] * arch["headDim"] * 2


def planned_tokens(body: dict[str, Any], memory_gib: float) -> int:
    spec = dict(body["spec"], gpus={**body["spec"]["gpus"], "memoryGiB": memory_gib})
    try:
        return plan(LLMDeploymentSpec.model_validate(spec)).kv_cache_tokens_per_replica
    except PlanError:
        return 0


def memory_for(body: dict[str, Any], tokens: int) -> float:
    """The GPU memory (GiB, 3 decimals) for which the planner plans `tokens` of KV cache per pod:
    bisection over spec.gpus.memoryGiB (the plan's KV cache grows with it)."""
    low, high = 0.5, 64.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if planned_tokens(body, mid) < tokens else (low, mid)
    memory = math.ceil(high * 1000) / 1000
    got = planned_tokens(body, memory)
    assert abs(got - tokens) <= 0.01 * tokens, f"no memoryGiB plans {tokens:,} tokens ({got:,})"
    return memory


def engine_figure(core: client.CoreV1Api, namespace: str, name: str) -> int:
    """kv_cache_size_tokens as the engine's own /metrics says, read by the test directly."""
    (pod,) = core.list_namespaced_pod(
        namespace, label_selector=f"llmfleet.dev/deployment={name},{ENGINES}"
    ).items
    metrics = scrape(f"http://{pod.status.pod_ip}:8000/metrics")
    (key,) = (k for k in metrics if k.startswith("vllm:cache_config_info{"))
    found = re.search(r'kv_cache_size_tokens="(\d+)"', key)
    if found:
        return int(found.group(1))
    blocks = re.search(r'num_gpu_blocks="(\d+)"', key)
    size = re.search(r'block_size="(\d+)"', key)
    assert blocks, key
    assert size, key
    return int(blocks.group(1)) * int(size.group(1))


def ready_seconds(core: client.CoreV1Api, namespace: str, name: str) -> float:
    """How long the engine pod took from its creation to Ready."""
    (pod,) = core.list_namespaced_pod(
        namespace, label_selector=f"llmfleet.dev/deployment={name},{ENGINES}"
    ).items
    (ready,) = (c for c in pod.status.conditions if c.type == "Ready")
    return float((ready.last_transition_time - pod.metadata.creation_timestamp).total_seconds())


def reported(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    obj = get_llmd(api, namespace, name)
    verified = condition(obj, "PlanVerified")
    return obj if verified.get("status") in ("True", "False") else None


def warnings(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason=PlanNotVerified"
    ).items
    return [e for e in events if e.type == "Warning"]


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=2) as node:
        yield node


@pytest.fixture(scope="module")
def fleet(
    cluster: Cluster, api: client.ApiClient, operator: Operator, node_runner: str
) -> Iterator[Fleet]:
    """Both LLMDeployments, one engine each, applied at once, each in a namespace of its own (the
    differing one's test counts the operator's writes in its namespace while the other's engine
    is still starting)."""
    core = client.CoreV1Api(api)
    suffix = uuid.uuid4().hex[:5]
    namespaces = {MATCH: f"t-plan-verified-{suffix}", DIFFER: f"t-plan-differs-{suffix}"}
    for namespace in namespaces.values():
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    wait_free_gpus(core, node_runner, 2)
    base = tiny_llmd(MATCH, enabled=False)
    base["spec"]["router"] = {"enabled": False}
    emulated = int(float(DEFAULT_KVCACHE_GIB) * GIB) // kv_bytes_per_token(base)
    base["spec"]["gpus"]["memoryGiB"] = memory_for(base, emulated)
    differ = stand_in(yaml.safe_load(yaml.safe_dump(base)))
    differ["metadata"]["name"] = DIFFER
    differ["spec"]["engine"]["extraArgs"] = OVERRIDE_ARGS
    try:
        for body in (base, differ):
            namespace = namespaces[body["metadata"]["name"]]
            cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(body))
        yield Fleet(namespaces, emulated)
    finally:
        # Both at once: each engine's preStop sleep runs beside the other's.
        with ThreadPoolExecutor(len(namespaces)) as pool:
            for gone in [
                pool.submit(delete_llmd, api, ns, name) for name, ns in namespaces.items()
            ]:
                gone.result()
        for namespace in namespaces.values():
            core.delete_namespace(namespace, propagation_policy="Background")


def settled(api: client.ApiClient, fleet: Fleet, name: str) -> dict[str, Any]:
    """The LLMDeployment once PlanVerified is True or False (its engine reported)."""
    return wait_until(
        lambda: reported(api, fleet.namespaces[name], name),
        STARTUP_TIMEOUT,
        2,
        f"{name}: PlanVerified True or False",
    )


def plan_of(api: client.ApiClient, fleet: Fleet, name: str) -> int:
    """The plan's KV cache per replica, as soon as status has the plan (before any engine)."""

    def status_plan() -> dict[str, Any] | None:
        obj = get_llmd(api, fleet.namespaces[name], name)
        found: dict[str, Any] | None = obj.get("status", {}).get("plan")
        return found

    return int(wait_until(status_plan, 60, 1, f"{name}: status.plan")["kvCacheTokensPerReplica"])


# First: the stand-in reports within seconds, and this test's idle resyncs pass while the real
# engine of the next one starts.
def test_an_engine_whose_kv_cache_differs_from_the_plan_is_reported_once(
    api: client.ApiClient,
    operator: Operator,
    fleet: Fleet,
) -> None:
    core = client.CoreV1Api(api)
    namespace = fleet.namespaces[DIFFER]
    obj = settled(api, fleet, DIFFER)
    planned = obj["status"]["plan"]["kvCacheTokensPerReplica"]
    measured = obj["status"]["measured"]["kvCacheTokens"]
    verified = condition(obj, "PlanVerified")
    deviation = (measured - planned) / planned
    print(f"\n{DIFFER}: measured {measured:,} KV tokens, planned {planned:,} ({deviation:+.1%})")
    seconds = ready_seconds(core, namespace, DIFFER)
    print(f"{DIFFER}: the stand-in's pod Ready {seconds:.0f}s after its creation")
    # The same spec but for extraArgs the planner ignores: the same plan as the matching one.
    assert planned == plan_of(api, fleet, MATCH)
    assert (verified["status"], verified["reason"]) == (
        "False",
        "KVCacheDiffersFromPlan",
    ), verified
    assert f"{measured:,}" in verified["message"]
    assert f"{planned:,}" in verified["message"]
    assert f"{deviation:+.1%}" in verified["message"]
    assert measured == engine_figure(core, namespace, DIFFER)
    assert measured <= 41 * 32

    (event,) = wait_until(
        lambda: warnings(core, namespace, DIFFER),
        30,
        1,
        "a Warning Event PlanNotVerified",
    )
    assert f"{measured:,}" in event.message

    # Idle resyncs read no engine again and write nothing: no status patch, no second Event.
    since = utcnow()
    time.sleep(2 * operator.resync_seconds + 1)
    writes = operator.writes_since(since, namespace)
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]
    assert len(warnings(core, namespace, DIFFER)) == 1


def test_an_engine_that_allocated_the_planned_kv_cache_verifies_the_plan(
    api: client.ApiClient, fleet: Fleet
) -> None:
    obj = settled(api, fleet, MATCH)
    planned = obj["status"]["plan"]["kvCacheTokensPerReplica"]
    measured = obj["status"]["measured"]["kvCacheTokens"]
    verified = condition(obj, "PlanVerified")
    print(f"\n{MATCH}: measured {measured:,} KV tokens, planned {planned:,}")
    seconds = ready_seconds(client.CoreV1Api(api), fleet.namespaces[MATCH], MATCH)
    print(f"{MATCH}: the vLLM pod Ready {seconds:.0f}s after its creation")
    assert (verified["status"], verified["reason"]) == ("True", "KVCacheMatchesPlan"), verified
    assert abs(measured - planned) / planned <= 0.10
    assert measured == engine_figure(client.CoreV1Api(api), fleet.namespaces[MATCH], MATCH)
    # The engine holds what VLLM_CPU_KVCACHE_SPACE gives it, which the spec describes truthfully.
    assert abs(measured - fleet.emulated_kv_tokens) / fleet.emulated_kv_tokens <= 0.10
    assert not warnings(client.CoreV1Api(api), fleet.namespaces[MATCH], MATCH)
