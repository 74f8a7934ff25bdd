"""The shard runner told to stop (SIGTERM: a preemption, a drain, a deletion), with a fake engine:
it hands back what the engine has not started, writes what it runs, exits within its grace
period, and the next pod answers the rest, every line once. (test_batch_runner.py: the rest.)"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from batchrunnerfakes import FakeEngine, config, output, run_main, write_input

from llmfleet.batch.engine import Finished
from llmfleet.batch.resume import Attempts
from llmfleet.batch.runner import EXIT_OK, EXIT_TERMINATED, ShardConfig, StoppedError, run_shard
from llmfleet.shard_report import parse_summary


def answered_once(cfg: ShardConfig, lines: int) -> bool:
    ids = Counter(r["custom_id"] for r in output(cfg))
    return set(ids.values()) == {1} and len(ids) == lines


def test_a_stop_hands_back_unstarted_lines_and_writes_the_running_ones_before_it_ends(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 30)
    cfg = config(tmp_path)
    engine = FakeEngine(per_step=3, running=4)
    with pytest.raises(StoppedError, match="20 not started"):
        run_shard(cfg, lambda: engine, should_stop=lambda: engine.steps >= 2)
    # 6 answered before the stop; of the 24 in flight the 4 running finish, 20 go back unstarted.
    assert len(engine.withdrawn) == 20
    assert len(output(cfg)) == 10
    written = {int(r["id"].removeprefix("batch_req_")) for r in output(cfg)}
    assert not set(engine.withdrawn) & written

    second = FakeEngine()
    progress = run_shard(cfg, lambda: second)
    assert sorted(second.submitted) == sorted(engine.withdrawn)
    assert answered_once(cfg, 30)
    assert progress.redone == 0  # nothing that had started was run again


def test_lines_still_running_when_the_grace_period_ends_run_again_once_and_cost_no_retry(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 12)
    # A 5 s grace period leaves no time to drain; no retries: a charged line would be given up.
    cfg = config(tmp_path, grace_seconds=5, max_retries_per_line=0)
    engine = FakeEngine(per_step=2, running=3)
    with pytest.raises(StoppedError):
        run_shard(cfg, lambda: engine, should_stop=lambda: engine.steps >= 1)
    assert len(output(cfg)) == 2

    second = FakeEngine()
    progress = run_shard(cfg, lambda: second)
    assert answered_once(cfg, 12)
    assert [r for r in output(cfg) if r["error"]] == []
    assert (progress.succeeded, progress.redone) == (12, 3)
    summary = parse_summary(progress.report().to_json())
    assert summary is not None
    assert summary.redone == 3


def test_a_stop_with_every_line_finished_in_the_drain_ends_the_shard_complete(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 9)
    cfg = config(tmp_path)
    engine = FakeEngine(per_step=3)  # runs every line it holds: none to hand back
    progress = run_shard(cfg, lambda: engine, should_stop=lambda: engine.steps >= 1)
    assert (progress.succeeded, len(output(cfg))) == (9, 9)


def test_sigterm_ends_the_command_with_143_once_the_running_lines_are_written(
    tmp_path: Path,
) -> None:
    write_input(tmp_path / "in.jsonl", 30)

    class Terminated(FakeEngine):
        def step(self) -> list[Finished]:
            if self.steps == 1:
                signal.raise_signal(signal.SIGTERM)
            return super().step()

    engine = Terminated(per_step=3, running=3)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert run_main(tmp_path, engine=lambda argv: engine) == EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
    output_file = tmp_path / "out" / "shard-00000-of-00001.jsonl"
    # The step that saw the signal and the next, which finished the 3 lines running.
    assert len(output_file.read_text().splitlines()) == 9
    summary = parse_summary((tmp_path / "termination-log").read_text())
    assert summary is not None
    assert summary.error is not None
    assert "terminated" in summary.error
    assert summary.succeeded == 9

    assert run_main(tmp_path, engine=lambda argv: FakeEngine()) == EXIT_OK
    ids = Counter(json.loads(line)["custom_id"] for line in output_file.read_text().splitlines())
    assert set(ids.values()) == {1}
    assert len(ids) == 30


def test_sigterm_while_the_model_loads_ends_the_command_at_once(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 4)

    def loading(argv: Sequence[str]) -> FakeEngine:
        signal.raise_signal(signal.SIGTERM)
        raise AssertionError("the load went on after SIGTERM")

    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert run_main(tmp_path, engine=loading) == EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary = parse_summary((tmp_path / "termination-log").read_text())
    assert summary is not None
    assert summary.error is not None
    assert "while the model loaded" in summary.error


ATTEMPTS = {
    # the shard's attempts file -> (attempts charged to line 7, lines redone so far)
    "a-runner-before-the-stop-markers": ("7\n8\n7\n", 2, 1),
    "handed-back-unstarted-at-a-stop": ("7\n8\n-7\n7\n", 1, 0),
    "running-at-a-stop": ("7\n~7\n7\n", 1, 1),
    "a-torn-last-entry": ("7\n7\n~", 2, 1),
}


@pytest.mark.parametrize(("text", "charged", "redone"), ATTEMPTS.values(), ids=ATTEMPTS.keys())
def test_only_a_pod_that_died_with_a_line_running_charges_it_an_attempt(
    tmp_path: Path, text: str, charged: int, redone: int
) -> None:
    path = tmp_path / ".shard-00000-of-00001.attempts"
    path.write_text(text)
    attempts = Attempts(path)
    assert (attempts.charged(7), attempts.redone) == (charged, redone)
    attempts.submit([7])  # run again by this pod: redone once more, durably
    attempts.close()
    assert Attempts(path).redone == redone + 1
