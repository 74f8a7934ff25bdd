"""What a batch shard reports, as the batch runner writes it and the operator reads it: the
runner's metrics port and series, and ShardReport with its two encodings (the container's
termination message when the shard ends, the /metrics page while it runs). The one module the
runner (llmfleet.batch) and the operator share: the operator imports nothing of the runner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

METRICS_PORT = 8080
# The grace period a runner assumes unless told otherwise (--grace-seconds): a pod's default.
DEFAULT_GRACE_SECONDS = 30
LINES = "llmfleet_batch_shard_lines"
TOKENS = "llmfleet_batch_shard_tokens"
TOKENS_PER_SECOND = "llmfleet_batch_shard_tokens_per_second"
INFO = "llmfleet_batch_shard_info"
# The kubelet keeps at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_LIMIT = 4096


@dataclass(frozen=True)
class ShardReport:
    """One shard's counts, as the operator reads them."""

    shard: int
    shards: int
    total: int
    succeeded: int
    failed: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_second: float = 0.0
    redone: int = 0  # lines run again after a pod stopped with them running
    error: str | None = None

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "shard": self.shard,
            "shards": self.shards,
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "tokensPerSecond": round(self.tokens_per_second, 3),
            "redone": self.redone,
        }
        if self.error:
            data["error"] = self.error[:2048]
        return json.dumps(data, separators=(",", ":"))[:TERMINATION_MESSAGE_LIMIT]


def parse_summary(message: str | None) -> ShardReport | None:
    """A termination message the runner wrote, or None when it is not one."""
    try:
        data = json.loads(message or "")
        return ShardReport(
            shard=int(data["shard"]),
            shards=int(data["shards"]),
            total=int(data["total"]),
            succeeded=int(data["succeeded"]),
            failed=int(data["failed"]),
            prompt_tokens=int(data.get("promptTokens", 0)),
            completion_tokens=int(data.get("completionTokens", 0)),
            tokens_per_second=float(data.get("tokensPerSecond", 0.0)),
            redone=int(data.get("redone", 0)),
            error=data.get("error"),
        )
    except (ValueError, KeyError, TypeError):
        return None


def parse_metrics(text: str) -> ShardReport | None:
    """A runner's /metrics page, or None when it has no shard figures (yet)."""
    values: dict[tuple[str, str], float] = {}
    info: Mapping[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == INFO:
                    info = sample.labels
                elif sample.name in (LINES, TOKENS):
                    key = sample.labels.get("state") or sample.labels.get("kind") or ""
                    values[(sample.name, key)] = sample.value
                elif sample.name == TOKENS_PER_SECOND:
                    values[(sample.name, "")] = sample.value
    except ValueError:
        return None
    if not info or (LINES, "total") not in values:
        return None
    return ShardReport(
        shard=int(info["shard"]),
        shards=int(info["shards"]),
        total=int(values[(LINES, "total")]),
        succeeded=int(values.get((LINES, "succeeded"), 0)),
        failed=int(values.get((LINES, "failed"), 0)),
        prompt_tokens=int(values.get((TOKENS, "prompt"), 0)),
        completion_tokens=int(values.get((TOKENS, "completion"), 0)),
        tokens_per_second=values.get((TOKENS_PER_SECOND, ""), 0.0),
        redone=int(values.get((LINES, "redone"), 0)),
    )
