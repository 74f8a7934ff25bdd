"""The batch shard runner's surroundings without vLLM: a fake engine, an input file of requests,
a shard's configuration and output, and the runner's command: shared by the unit tests of the
runner and of how it stops."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmfleet.batch.engine import Finished, RequestRejectedError
from llmfleet.batch.records import Choice, Completion, Request
from llmfleet.batch.runner import ShardConfig, main


class FakeEngine:
    """Finishes up to `per_step` requests per step, oldest first; optionally dies after some
    steps (as a killed process would: nothing of the step is returned). It runs the oldest
    `running` requests at once (None: all of them) and hands the others back when told to stop."""

    def __init__(
        self,
        per_step: int = 3,
        die_after_steps: int | None = None,
        reject: set[int] = frozenset(),
        running: int | None = None,
    ) -> None:
        self.per_step = per_step
        self.die_after_steps = die_after_steps
        self.reject = reject
        self.running = running
        self.queue: list[tuple[Request, Mapping[str, Any]]] = []
        self.steps = 0
        self.max_queued = 0
        self.submitted: list[int] = []
        self.withdrawn: list[int] = []

    @property
    def model_name(self) -> str:
        return "fake"

    def submit(self, request: Request, sampling: Mapping[str, Any]) -> None:
        if request.line in self.reject:
            raise RequestRejectedError("ValueError: prompt is longer than maxModelLen")
        self.queue.append((request, sampling))
        self.submitted.append(request.line)
        self.max_queued = max(self.max_queued, len(self.queue))

    def step(self) -> list[Finished]:
        self.steps += 1
        if self.die_after_steps is not None and self.steps > self.die_after_steps:
            raise RuntimeError("killed")
        done, self.queue = self.queue[: self.per_step], self.queue[self.per_step :]
        return [
            Finished(
                r.line,
                Completion(
                    prompt_tokens=3,
                    choices=(Choice(f"answer {r.custom_id} {s.get('max_tokens')}", "length"),),
                    completion_tokens=int(s.get("max_tokens", 16)),
                ),
            )
            for r, s in done
        ]

    def has_unfinished(self) -> bool:
        return bool(self.queue)

    def withdraw(self, lines: Sequence[int]) -> list[int]:
        if self.running is None:
            return []
        queued = set(lines[self.running :])
        self.queue = [(r, s) for r, s in self.queue if r.line not in queued]
        self.withdrawn += [n for n in lines if n in queued]
        return [n for n in lines if n in queued]


def request_line(i: int) -> str:
    return json.dumps(
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": {"prompt": "p"}}
    )


def write_input(path: Path, lines: int, bad: Mapping[int, str] | None = None) -> Path:
    bad = bad or {}
    path.write_text("\n".join(bad.get(i, request_line(i)) for i in range(1, lines + 1)) + "\n")
    return path


def config(tmp_path: Path, shard: int = 0, shards: int = 1, **kw: Any) -> ShardConfig:
    return ShardConfig(
        input=tmp_path / "in.jsonl",
        output_dir=tmp_path / "out",
        shard=shard,
        shards=shards,
        job="ns/job",
        **kw,
    )


def output(cfg: ShardConfig) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cfg.output.read_text().splitlines()]


def run_main(tmp_path: Path, *extra: str, engine: Callable[[Sequence[str]], Any]) -> int:
    log = tmp_path / "termination-log"
    return main(
        [
            "--input",
            str(tmp_path / "in.jsonl"),
            "--output-dir",
            str(tmp_path / "out"),
            "--termination-log",
            str(log),
            "--defaults",
            '{"max_tokens": 2}',
            *extra,
            "--model",
            "m",
            "--enforce-eager",
        ],
        engine_factory=engine,
    )
