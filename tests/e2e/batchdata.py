"""What the LLMBatchJob e2e tests share: their claims (directories the node runner mounts), the
request lines they write and the records the shards write back. The `volumes` fixture that
removes the claims is in conftest.py."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client
from localcluster.supervisor import Cluster

from .harness import TEST_NAMESPACE_LABEL, bound_claim, wait_until


def claim(api: client.ApiClient, cluster: Cluster, ns: str, name: str) -> Path:
    """A bound claim; the node runner keeps its files in the returned directory."""
    core = client.CoreV1Api(api)
    directory = cluster.state_dir / "pvcs" / ns / name
    directory.mkdir(parents=True, exist_ok=True)
    bound_claim(core, ns, name, str(directory))
    wait_until(
        lambda: core.read_namespaced_persistent_volume_claim(name, ns).status.phase == "Bound",
        timeout=60,
        what=f"claim {name} bound",
    )
    return directory


def input_claim(api: client.ApiClient, cluster: Cluster, ns: str, lines: list[str]) -> Path:
    """The claim `data` (its directory returned) with `lines` as in/prompts.jsonl, the input
    `manifests.batch_job` reads."""
    data = claim(api, cluster, ns, "data")
    (data / "in").mkdir()
    (data / "in" / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return data


def remove_claims(api: client.ApiClient, cluster: Cluster, ns: str) -> None:
    """The PersistentVolumes `claim` made for `ns`, and their directories."""
    core = client.CoreV1Api(api)
    for pv in core.list_persistent_volume(label_selector=f"{TEST_NAMESPACE_LABEL}={ns}").items:
        core.delete_persistent_volume(pv.metadata.name)
    shutil.rmtree(cluster.state_dir / "pvcs" / ns, ignore_errors=True)


def request_line(i: int) -> str:
    """Line i (1-based): chat and completions in turn, lengths spread so results trickle in."""
    body: dict[str, Any] = {"max_tokens": 8 + (i % 12) * 10, "ignore_eos": True}
    if i % 2:
        body["messages"] = [{"role": "user", "content": f"Question {i}: what is a pod?"}]
        url = "/v1/chat/completions"
    else:
        body["prompt"] = f"Once upon a time, request {i}"
        url = "/v1/completions"
    return json.dumps({"custom_id": f"req-{i}", "method": "POST", "url": url, "body": body})


def shard_pod(api: client.ApiClient, ns: str, index: int) -> client.V1Pod | None:
    """The Running pod of shard `index`, if one runs."""
    pods = (
        client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="llmfleet.dev/batchjob").items
    )
    mine = [
        p
        for p in pods
        if (p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index")
        == str(index)
        and p.status.phase == "Running"
    ]
    return mine[0] if mine else None


def records(directory: Path) -> list[dict[str, Any]]:
    """Every record the shards wrote into the output directory `directory`."""
    out = []
    for path in sorted(directory.glob("shard-*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def answered(found: list[dict[str, Any]]) -> Counter[str]:
    """How many successful records each custom_id has (exactly once: every count is 1)."""
    return Counter(r["custom_id"] for r in found if r["error"] is None)
