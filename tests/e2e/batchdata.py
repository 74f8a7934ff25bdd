"""What the LLMBatchJob e2e tests share: their claims (directories the node runner mounts), the
request lines they write and the records the shards write back. The `volumes` fixture that
removes the claims is in conftest.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client
from localcluster.claims import claim
from localcluster.supervisor import Cluster


def input_claim(api: client.ApiClient, cluster: Cluster, ns: str, lines: list[str]) -> Path:
    """The claim `data` (its directory returned) with `lines` as in/prompts.jsonl, the input
    `manifests.batch_job` reads."""
    data = claim(api, cluster, ns, "data")
    (data / "in").mkdir()
    (data / "in" / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return data


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
