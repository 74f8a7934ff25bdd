"""The stable split of an input file into shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmfleet.batch.sharding import output_name, read_shard, shard_of


def good(custom_id: str) -> str:
    return json.dumps(
        {"custom_id": custom_id, "url": "/v1/completions", "body": {"prompt": custom_id}}
    )


@pytest.mark.parametrize("shards", [1, 2, 3, 7])
def test_every_line_belongs_to_exactly_one_shard_round_robin(shards: int) -> None:
    owners = [shard_of(line, shards) for line in range(1, 50)]
    assert owners[:shards] == list(range(shards))
    assert all(0 <= o < shards for o in owners)
    assert all(owners[i] == owners[i + shards] for i in range(len(owners) - shards))


def test_output_files_are_named_by_shard_and_count() -> None:
    assert output_name(3, 12) == "shard-00003-of-00012.jsonl"


def test_a_shard_reads_only_its_lines_and_skips_blank_ones(tmp_path: Path) -> None:
    lines = [good(f"r{i}") for i in range(1, 8)]
    lines[3] = "   "
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n\n")
    shards = [read_shard(tmp_path / "in.jsonl", k, 2) for k in range(2)]
    assert [r.line for r in shards[0].requests] == [1, 3, 5, 7]
    assert [r.line for r in shards[1].requests] == [2, 6]  # line 4 is blank
    assert sum(s.total for s in shards) == 6


def test_a_repeated_custom_id_is_an_error_for_whichever_shard_owns_the_later_line(
    tmp_path: Path,
) -> None:
    lines = [good("a"), good("b"), good("c"), good("a"), good("a")]
    (tmp_path / "in.jsonl").write_text("\n".join(lines))
    first, second = (read_shard(tmp_path / "in.jsonl", k, 2) for k in range(2))
    assert [r.custom_id for r in first.requests] == ["a", "c"]
    assert [(e.line, e.code) for e in first.errors] == [(5, "duplicate_custom_id")]
    assert [(e.line, e.code) for e in second.errors] == [(4, "duplicate_custom_id")]
    assert "first on line 1" in second.errors[0].message


def test_a_shard_index_outside_the_shard_count_is_refused(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text(good("a"))
    with pytest.raises(ValueError, match=r"not in 0\.\.1"):
        read_shard(tmp_path / "in.jsonl", 2, 2)
