"""What a test reads of a running operator, however it runs (a process or the chart's pod): its
Prometheus metrics, its /healthz, and its API writes as the API server's audit log records them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any


def fetch_metrics(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        text: str = r.read().decode()
        return text


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    want = [f'{k}="{v}"' for k, v in sorted(labels.items())]
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        metric, _, label_text = key.partition("{")
        if metric == name and all(p in label_text for p in want):
            total += float(value)
    return total


def health(url: str) -> tuple[int, str]:
    """What /healthz answers: the status code and the text."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def audit_writes(
    state_dir: Path,
    username: str,
    since: datetime,
    namespace: str | None = None,
    *,
    leases: bool = False,
) -> list[dict[str, Any]]:
    """Write requests `username` made since `since` (the audit log holds writes only), without
    Lease requests (the leader's renewals) unless `leases`."""
    out = []
    for path in sorted(state_dir.glob("audit*.log")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["user"]["username"] != username:
                continue
            t = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if t < since:
                continue
            ref = e.get("objectRef") or {}
            if namespace and ref.get("namespace") != namespace:
                continue
            if not leases and ref.get("resource") == "leases":
                continue
            out.append(e)
    return out
