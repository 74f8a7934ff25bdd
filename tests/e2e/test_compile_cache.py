"""vLLM's cache outlives the pod (spec.engine.compileCache auto, docs/autoscaling.md "Compile cache
kept across pods"): with a model cache claim, a second replica of an LLMDeployment starts with
the first one's cache entries, and an engine with a different argument keeps its own.

On the lab the node runner starts vLLM with --enforce-eager (docs/cpu-adaptations.md), so vLLM
compiles nothing and writes no torch_compile_cache. What vLLM 0.32 does keep under
VLLM_CACHE_ROOT there is its model-class inspection, `modelinfos/<module>-<class>.json`
(vllm/model_executor/models/registry.py): written (to a temporary file, renamed into place) on a
miss, only read on a hit, and vLLM logs the hit at DEBUG only, which the operator does not set.
So the directory shows the hit: the second replica runs with the same VLLM_CACHE_ROOT and leaves
the first one's file as it was (same inode, same modification time), where a miss would have
replaced it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from localcluster.claims import claim, remove_claims
from localcluster.metricsstack.load import delete_llmd, tiny_llmd, wait_free_gpus, wait_until
from localcluster.supervisor import Cluster

from . import localnode
from .harness import Operator, get_llmd

pytestmark = [pytest.mark.cluster, pytest.mark.lab("the node runner's vLLM engines")]

STARTUP_TIMEOUT = 420  # two vLLM engines starting one after the other on 2 shared cores
CLAIM = "hf"
ENGINES = "app.kubernetes.io/component=engine"
OTHER_ARGS = ["--seed", "7"]


@pytest.fixture(scope="module")
def node_runner(cluster: Cluster, vllm_python: Path) -> Iterator[str]:
    with localnode.local_node(cluster, gpus=2) as node:
        yield node


@pytest.fixture
def namespace(cluster: Cluster, api: client.ApiClient, node_runner: str) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"t-compile-cache-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_free_gpus(core, node_runner, 2)
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
        remove_claims(api, cluster, name)


def llmd(name: str, extra_args: list[str] | None = None) -> dict[str, Any]:
    body = tiny_llmd(name, minReplicas=1, maxReplicas=2)
    spec = body["spec"]
    spec["model"] = {**spec["model"], "cache": {"claimName": CLAIM}}
    spec["router"] = {"enabled": False}
    if extra_args:
        spec["engine"] = {**spec["engine"], "extraArgs": extra_args}
    return body


def ready(api: client.ApiClient, namespace: str, name: str, replicas: int) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = get_llmd(api, namespace, name)
        got = obj.get("status", {}).get("readyReplicas") or 0
        return obj if got >= replicas else None

    found: dict[str, Any] = wait_until(
        check, STARTUP_TIMEOUT, 2, f"{name}: {replicas} ready engine(s)"
    )
    return found


def cache_roots(core: client.CoreV1Api, namespace: str, name: str) -> set[str]:
    """VLLM_CACHE_ROOT of every engine pod of `name`, as the operator rendered it."""
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"llmfleet.dev/deployment={name},{ENGINES}"
    ).items
    return {
        e.value
        for pod in pods
        for c in pod.spec.containers
        for e in c.env or []
        if e.name == "VLLM_CACHE_ROOT"
    }


def entries(key_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file under one key's directory: relative path -> (inode, mtime in ns)."""
    return {
        str(f.relative_to(key_dir)): (f.stat().st_ino, f.stat().st_mtime_ns)
        for f in key_dir.rglob("*")
        if f.is_file()
    }


def key_dirs(claim_dir: Path) -> list[Path]:
    root = claim_dir / "vllm-cache"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def test_a_second_replica_reuses_the_first_ones_cache_and_other_args_get_their_own(
    cluster: Cluster, api: client.ApiClient, operator: Operator, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    claim_dir = claim(api, cluster, namespace, CLAIM)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(llmd("cc")))
    obj = ready(api, namespace, "cc", 1)
    assert "claim hf" in obj["status"]["compileCache"]

    (key_dir,) = key_dirs(claim_dir)
    (root,) = cache_roots(core, namespace, "cc")
    assert root.endswith(f"/vllm-cache/{key_dir.name}")
    first = entries(key_dir)
    assert any(path.startswith("modelinfos/") for path in first), first

    # A second replica of the same LLMDeployment: the same directory, and the first one's
    # entries read, not written again.
    cluster.kubectl(
        "patch", "llmd", "cc", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"autoscaling": {"minReplicas": 2}}}',
    )  # fmt: skip
    ready(api, namespace, "cc", 2)
    assert cache_roots(core, namespace, "cc") == {root}
    assert key_dirs(claim_dir) == [key_dir]
    after = entries(key_dir)
    assert {path: after.get(path) for path in first} == first

    # A different engine argument: a directory of its own; the first one's is left alone. Its
    # engine need not become Ready: its miss shows once it has written its model-class file,
    # early in its start (renamed into place, so a .json there is whole).
    delete_llmd(api, namespace, "cc")
    other = llmd("cc-seed", OTHER_ARGS)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(other))

    def written_elsewhere() -> Path | None:
        for d in key_dirs(claim_dir):
            if d != key_dir and any(
                p.startswith("modelinfos/") and p.endswith(".json") for p in entries(d)
            ):
                return d
        return None

    other_dir = wait_until(
        written_elsewhere, STARTUP_TIMEOUT, 1, "cc-seed's model-class file in a key of its own"
    )
    assert sorted(key_dirs(claim_dir)) == sorted([key_dir, other_dir])
    assert cache_roots(core, namespace, "cc-seed") == {root.replace(key_dir.name, other_dir.name)}
    assert entries(key_dir) == after
    # Stopped mid-start before the fixture removes the claim it writes to.
    delete_llmd(api, namespace, "cc-seed")
