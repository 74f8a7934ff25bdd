"""Stable split of the input by line number: line i (1-based, counting blank lines) belongs to
shard (i - 1) mod shards. The same file and shard count always give a shard the same lines, so a
restarted pod takes the same share; round robin keeps shards even when the input is sorted by
length.

Every shard reads the whole file (only its own lines are validated in full), so a custom_id
repeated anywhere is found the same way by every shard: its first line is answered, each later
one gets an error record from the shard that owns that later line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmfleet.batch.records import (
    LineError,
    Request,
    custom_id_of,
    duplicate_error,
    parse_line,
)


def shard_of(line: int, shards: int) -> int:
    return (line - 1) % shards


def output_name(shard: int, shards: int) -> str:
    return f"shard-{shard:05d}-of-{shards:05d}.jsonl"


@dataclass
class ShardInput:
    """The lines of one shard: those to run, and those that get an error record."""

    requests: list[Request] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.requests) + len(self.errors)


def read_shard(path: Path, shard: int, shards: int) -> ShardInput:
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not in 0..{shards - 1}")
    out = ShardInput()
    first_seen: dict[str, int] = {}
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue  # blank lines are not requests
            mine = shard_of(number, shards) == shard
            custom_id = custom_id_of(raw)
            first = first_seen.setdefault(custom_id, number) if custom_id else number
            if not mine:
                continue
            if first != number and custom_id is not None:
                out.errors.append(duplicate_error(number, custom_id, first))
                continue
            parsed = parse_line(number, raw)
            if isinstance(parsed, LineError):
                out.errors.append(parsed)
            else:
                out.requests.append(parsed)
    return out
