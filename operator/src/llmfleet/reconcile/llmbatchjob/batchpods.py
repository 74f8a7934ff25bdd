"""What one shard pod of an LLMBatchJob shows: its shard, how its runner ended, and how long it
held its node's GPUs. Pure functions of the pod as the API server returns it."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from llmfleet.render.batchjob import CONTAINER

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
_ENDED = ("Succeeded", "Failed")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return None


def shard_index(pod: Mapping[str, Any]) -> int | None:
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(INDEX_ANNOTATION) or (meta.get("labels") or {}).get(
        INDEX_ANNOTATION
    )
    return int(value) if value is not None and str(value).isdigit() else None


def runner_end(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The runner container's terminated state, once it ended."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            state = cs.get("state") or {}
            if "terminated" in state:
                terminated: dict[str, Any] = state["terminated"]
                return terminated
    return None


def held_seconds(pod: Mapping[str, Any], at: datetime, since: datetime | None = None) -> float:
    """Seconds the pod has held its node (its GPUs) from its start (the kubelet took it) to its
    runner's end, or to `at` while it has not ended; with `since`, only those after it."""
    status = pod.get("status") or {}
    start = parse_time(status.get("startTime"))
    if start is None:
        return 0.0
    end = parse_time((runner_end(pod) or {}).get("finishedAt"))
    if end is None:
        end = start if status.get("phase") in _ENDED else at
    if since is not None:
        start = max(start, since)
    return max(0.0, (min(end, at) - start).total_seconds())
