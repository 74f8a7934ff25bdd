"""The shard runner with a fake engine: resumable, exactly once, bad lines become error records,
the engine is kept full. (The real vLLM engine runs in tests/e2e/test_batchjob.py.)"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from batchrunnerfakes import FakeEngine, config, output, request_line, run_main, write_input
from prometheus_client import generate_latest

from llmfleet.batch.progress import Progress
from llmfleet.batch.resume import OutputOwnedError
from llmfleet.batch.runner import (
    EXIT_CONFIG,
    EXIT_OK,
    run_shard,
)
from llmfleet.shard_report import parse_metrics, parse_summary


def test_every_line_of_the_shard_gets_one_record_and_the_counts_add_up(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 20)
    cfg = config(tmp_path, defaults={"max_tokens": 4})
    progress = run_shard(cfg, FakeEngine)
    records = output(cfg)
    assert sorted(r["custom_id"] for r in records) == sorted(f"r{i}" for i in range(1, 21))
    assert (progress.total, progress.succeeded, progress.failed) == (20, 20, 0)
    assert progress.completion_tokens == 80  # the default max_tokens reached the engine


def test_the_engine_gets_the_whole_shard_before_the_first_step(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 50)
    engine = FakeEngine(per_step=5)
    run_shard(config(tmp_path), lambda: engine)
    assert engine.max_queued == 50


def test_at_most_max_in_flight_requests_are_queued_and_refilled_as_they_finish(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 50)
    engine = FakeEngine(per_step=5)
    cfg = config(tmp_path, max_in_flight=12)
    run_shard(cfg, lambda: engine)
    assert engine.max_queued == 12
    assert len(output(cfg)) == 50


KILLS = {
    "killed-after-one-step": 1,
    "killed-after-five-steps": 5,
    "killed-before-any-step": 0,
}


@pytest.mark.parametrize("steps", KILLS.values(), ids=KILLS.keys())
def test_a_restarted_shard_answers_only_what_is_missing_so_every_line_is_answered_once(
    tmp_path: Path, steps: int
) -> None:
    write_input(tmp_path / "in.jsonl", 30)
    cfg = config(tmp_path)
    with pytest.raises(RuntimeError, match="killed"):
        run_shard(cfg, lambda: FakeEngine(die_after_steps=steps))
    before = cfg.output.read_bytes()
    assert len(output(cfg)) == 3 * steps
    second = FakeEngine()
    progress = run_shard(cfg, lambda: second)
    assert cfg.output.read_bytes().startswith(before)  # nothing written is rewritten
    assert len(second.submitted) == 30 - 3 * steps
    ids = Counter(r["custom_id"] for r in output(cfg))
    assert set(ids.values()) == {1}
    assert len(ids) == 30
    assert (progress.succeeded, progress.failed) == (30, 0)


def test_a_torn_last_line_from_a_kill_is_cut_and_its_request_runs_again(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 6)
    cfg = config(tmp_path)
    with pytest.raises(RuntimeError):
        run_shard(cfg, lambda: FakeEngine(per_step=2, die_after_steps=1))
    whole = cfg.output.read_bytes()
    with cfg.output.open("ab") as f:
        f.write(b'{"id":"batch_req_3","custom_id":"r3","respo')  # killed mid-write
    run_shard(cfg, FakeEngine)
    assert cfg.output.read_bytes().startswith(whole)
    records = output(cfg)
    assert sorted(r["custom_id"] for r in records) == [f"r{i}" for i in range(1, 7)]


def test_malformed_lines_get_error_records_naming_them_and_the_rest_is_answered(
    tmp_path: Path,
) -> None:
    bad = {
        2: "{not json",
        5: json.dumps({"custom_id": "x", "url": "/v1/nope", "body": {}}),
        7: json.dumps({"custom_id": "y", "url": "/v1/completions"}),
        9: request_line(1),  # duplicate custom_id r1
        11: json.dumps({"url": "/v1/completions", "body": {"prompt": "p"}}),
    }
    write_input(tmp_path / "in.jsonl", 12, bad)
    cfg = config(tmp_path)
    progress = run_shard(cfg, FakeEngine)
    errors = {r["error"]["line"]: r["error"]["message"] for r in output(cfg) if r["error"]}
    assert sorted(errors) == sorted(bad)
    assert all(message.startswith(f"line {n}: ") for n, message in errors.items())
    assert (progress.succeeded, progress.failed, progress.total) == (7, 5, 12)


def test_a_request_the_engine_refuses_gets_an_error_record_and_the_shard_goes_on(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 5)
    cfg = config(tmp_path)
    run_shard(cfg, lambda: FakeEngine(reject={3}))
    errors = [r["error"] for r in output(cfg) if r["error"]]
    assert errors == [
        {
            "code": "engine_error",
            "message": "line 3: ValueError: prompt is longer than maxModelLen",
            "line": 3,
        }
    ]


def test_a_line_in_flight_at_every_crash_is_given_up_after_max_retries(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 4)
    cfg = config(tmp_path, max_retries_per_line=1)
    for _ in range(2):  # two crashes with every line in flight
        with pytest.raises(RuntimeError):
            run_shard(cfg, lambda: FakeEngine(die_after_steps=0))
    progress = run_shard(cfg, FakeEngine)
    assert progress.failed == 4
    assert {r["error"]["code"] for r in output(cfg)} == {"retries_exhausted"}


def test_a_finished_shard_restarts_without_loading_the_engine(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 3)
    cfg = config(tmp_path)
    run_shard(cfg, FakeEngine)

    def no_engine() -> FakeEngine:
        raise AssertionError("the model was loaded for nothing")

    assert run_shard(cfg, no_engine).succeeded == 3


REFUSED = {
    "another-job": ({"job": "other/job", "shards": 1}, "belongs to job 'other/job'"),
    "another-shard-count": ({"job": "ns/job", "shards": 4}, "resume with shards: 4"),
}


@pytest.mark.parametrize(("owner", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_an_output_directory_written_otherwise_is_refused(
    tmp_path: Path, owner: dict[str, Any], message: str
) -> None:
    write_input(tmp_path / "in.jsonl", 2)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".llmfleet-job.json").write_text(json.dumps(owner))
    with pytest.raises(OutputOwnedError, match=message):
        run_shard(config(tmp_path), FakeEngine)


def test_shards_of_one_job_share_the_output_directory(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 9)
    for k in range(3):
        run_shard(config(tmp_path, shard=k, shards=3), FakeEngine)
    files = sorted(p.name for p in (tmp_path / "out").glob("shard-*"))
    assert files == [f"shard-0000{k}-of-00003.jsonl" for k in range(3)]


def test_progress_is_served_as_metrics_and_read_back() -> None:
    progress = Progress(shard=1, shards=4, total=10)
    progress.answered(prompt_tokens=5, completion_tokens=7)
    progress.errored()
    progress.publish()
    report = parse_metrics(generate_latest(progress.registry).decode())
    assert report is not None
    assert (report.shard, report.shards, report.total, report.succeeded, report.failed) == (
        1,
        4,
        10,
        1,
        1,
    )
    assert (report.prompt_tokens, report.completion_tokens) == (5, 7)
    assert parse_summary(report.to_json()) == report
    assert parse_metrics("# nothing\n") is None
    assert parse_summary("Traceback ...") is None


def test_the_command_passes_engine_arguments_through_and_writes_a_summary(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 4)
    seen: list[Sequence[str]] = []

    def factory(argv: Sequence[str]) -> FakeEngine:
        seen.append(argv)
        return FakeEngine()

    assert run_main(tmp_path, engine=factory) == EXIT_OK
    assert seen == [["--model", "m", "--enforce-eager"]]
    summary = parse_summary((tmp_path / "termination-log").read_text())
    assert summary is not None
    assert (summary.total, summary.succeeded, summary.completion_tokens) == (4, 4, 8)


EXITS = {
    "missing-input": (False, None, EXIT_CONFIG, "does not exist"),
    "output-of-another-job": (True, "other/job", EXIT_CONFIG, "belongs to job"),
}


@pytest.mark.parametrize(("make_input", "owner", "code", "error"), EXITS.values(), ids=EXITS.keys())
def test_the_command_exits_3_when_retrying_cannot_help(
    tmp_path: Path, make_input: bool, owner: str | None, code: int, error: str
) -> None:
    if make_input:
        write_input(tmp_path / "in.jsonl", 1)
    if owner:
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / ".llmfleet-job.json").write_text(json.dumps({"job": owner}))
    assert run_main(tmp_path, engine=lambda argv: FakeEngine()) == code
    summary = parse_summary((tmp_path / "termination-log").read_text())
    assert summary is not None
    assert summary.error is not None
    assert error in summary.error
