"""Run one shard of a batch: `python3 -m llmfleet.batch.runner --input F --output-dir D
--shards N [--shard K] [runner options] <vLLM engine arguments>`.

In an Indexed Job the shard is the pod's JOB_COMPLETION_INDEX. The runner

1. claims the output directory for its job (refusing one another job owns: exit 3),
2. reads its share of the input (`sharding`), and what its output file already answers
   (`resume`: a torn last line is cut, answered lines are skipped),
3. writes error records for lines that cannot run, then loads the model once and keeps the engine
   fed (`feeding`),
4. appends each record as its request finishes (flushed at once, fsynced at least every
   --fsync-seconds and at the end), and serves its progress on /metrics.

It ends with exit 0 when every line has a record (failed lines included), and writes a JSON
summary to --termination-log, which Kubernetes shows in the pod status. SIGTERM stops it within
--grace-seconds (the pod's terminationGracePeriodSeconds): at once while the model loads, else
once the lines the engine runs are written (`feeding`); it then exits 143 unless every line of
the shard has its record.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from llmfleet.batch.engine import Engine, VllmEngine
from llmfleet.batch.feeding import Feed, RecordWriter, StoppedError, drain_seconds, feed
from llmfleet.batch.progress import Progress
from llmfleet.batch.records import RETRIES_EXHAUSTED, LineError, Request, error_record
from llmfleet.batch.resume import (
    Attempts,
    OutputOwnedError,
    attempts_name,
    claim_output,
    recover_output,
)
from llmfleet.batch.sharding import output_name, read_shard
from llmfleet.shard_report import DEFAULT_GRACE_SECONDS, METRICS_PORT

log = logging.getLogger("llmfleet.batch")

EXIT_OK = 0
EXIT_FAILED = 1  # worth a retry (the Job restarts the shard)
EXIT_CONFIG = 3  # retrying cannot help (the Job fails at once)
EXIT_TERMINATED = 143
DEFAULT_MAX_IN_FLIGHT = 1024
DEFAULT_FSYNC_SECONDS = 1.0
__all__ = ["ShardConfig", "StoppedError", "main", "run_shard"]


@dataclass(frozen=True)
class ShardConfig:
    input: Path
    output_dir: Path
    shard: int
    shards: int
    job: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    max_retries_per_line: int = 3
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    fsync_seconds: float = DEFAULT_FSYNC_SECONDS
    grace_seconds: float = DEFAULT_GRACE_SECONDS

    @property
    def output(self) -> Path:
        return self.output_dir / output_name(self.shard, self.shards)

    @property
    def attempts(self) -> Path:
        return self.output_dir / attempts_name(self.shard, self.shards)


class Stop:
    """SIGTERM's flag, asked by the feeding loop. While the model loads nothing is in flight, so
    then the signal ends the load at once rather than waiting out a load the pod has no time
    left for."""

    def __init__(self) -> None:
        self.requested = False
        self._interruptible = False

    def __call__(self) -> bool:
        return self.requested

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self._interruptible:
            raise StoppedError("stopped while the model loaded")

    @contextmanager
    def interrupting(self) -> Iterator[None]:
        if self.requested:
            raise StoppedError("stopped before the model loaded")
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False


def run_shard(
    cfg: ShardConfig,
    engine_factory: Callable[[], Engine],
    progress: Progress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Progress:
    """Answer every line of the shard that has no record yet. Raises OutputOwnedError, StoppedError,
    or whatever the engine raises (the records written so far stay)."""
    progress = progress or Progress(cfg.shard, cfg.shards)
    claim_output(cfg.output_dir, cfg.job, cfg.shards)
    shard = read_shard(cfg.input, cfg.shard, cfg.shards)
    found = recover_output(cfg.output)
    if found.torn_bytes:
        log.warning("cut a torn last line (%d bytes) from %s", found.torn_bytes, cfg.output)
    progress.total = shard.total
    progress.succeeded, progress.failed = found.succeeded, found.failed
    progress.prompt_tokens, progress.completion_tokens = (
        found.prompt_tokens,
        found.completion_tokens,
    )
    progress.publish()
    log.info(
        "shard %d/%d: %d lines, %d already answered, %d invalid",
        cfg.shard,
        cfg.shards,
        shard.total,
        len(found.done),
        len(shard.errors),
    )
    attempts = Attempts(cfg.attempts)
    progress.redone = attempts.redone
    writer = RecordWriter(cfg.output, cfg.fsync_seconds)
    try:
        for error in shard.errors:
            if error.line not in found.done:
                writer.write(error_record(error))
                progress.errored()
        todo: deque[Request] = deque()
        for request in shard.requests:
            if request.line in found.done:
                continue
            if attempts.charged(request.line) > cfg.max_retries_per_line:
                writer.write(error_record(_exhausted(request, attempts.charged(request.line))))
                progress.errored()
            else:
                todo.append(request)
        progress.publish()
        if todo:
            work = Feed(
                engine=engine_factory(),
                writer=writer,
                progress=progress,
                attempts=attempts,
                defaults=cfg.defaults,
                max_in_flight=cfg.max_in_flight,
                drain_seconds=drain_seconds(cfg.grace_seconds),
            )
            feed(work, todo, should_stop)
    finally:
        attempts.close()
        writer.close()
        progress.publish()
    return progress


def _exhausted(request: Request, attempts: int) -> LineError:
    return LineError(
        request.line,
        request.custom_id,
        RETRIES_EXHAUSTED,
        f"line {request.line}: not run again after {attempts} attempts; its shard's pod died "
        "while running it each time (maxRetriesPerLine)",
    )


# --- command line ------------------------------------------------------------------------------


def build_parser(prog: str = "python -m llmfleet.batch.runner") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Answer a JSONL file of OpenAI Batch API requests with vLLM's offline engine. "
            "Arguments not listed here are vLLM engine arguments (--model is required)."
        ),
    )
    p.add_argument("--input", type=Path, required=True, help="the JSONL input file")
    p.add_argument(
        "--output-dir", type=Path, required=True, help="directory for the shard output files"
    )
    p.add_argument("--shards", type=int, default=1, help="shards in the job (default 1)")
    p.add_argument(
        "--shard",
        type=int,
        default=None,
        help="this shard's index (default: $JOB_COMPLETION_INDEX, else 0)",
    )
    p.add_argument(
        "--job",
        default="local",
        help="the job's identity (namespace/name), recorded in the output directory",
    )
    p.add_argument(
        "--defaults",
        default="{}",
        help='sampling defaults as a JSON object of request body fields, e.g. {"max_tokens": 64}',
    )
    p.add_argument("--max-retries-per-line", type=int, default=3)
    p.add_argument("--max-in-flight", type=int, default=DEFAULT_MAX_IN_FLIGHT)
    p.add_argument("--fsync-seconds", type=float, default=DEFAULT_FSYNC_SECONDS)
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=DEFAULT_GRACE_SECONDS,
        help="seconds between SIGTERM and SIGKILL (the pod's terminationGracePeriodSeconds): "
        "the runner stops within them (default %(default)s)",
    )
    p.add_argument("--host", default="0.0.0.0", help="address of the metrics endpoint")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help=f"port of the Prometheus endpoint (pods use {METRICS_PORT}); default 0: none",
    )
    p.add_argument(
        "--termination-log",
        type=Path,
        default=None,
        help="file to write the JSON summary to (Kubernetes: /dev/termination-log)",
    )
    return p


def parse_args(
    argv: Sequence[str], prog: str = "python -m llmfleet.batch.runner"
) -> tuple[argparse.Namespace, list[str]]:
    parser = build_parser(prog)
    args, engine_argv = parser.parse_known_args(list(argv))
    if args.shard is None:
        index = os.environ.get("JOB_COMPLETION_INDEX", "0")
        if not index.isdigit():
            parser.error(f"JOB_COMPLETION_INDEX={index!r} is not a shard index; pass --shard")
        args.shard = int(index)
    if args.shards < 1 or not 0 <= args.shard < args.shards:
        parser.error(f"--shard {args.shard} must be in 0..{args.shards - 1}")
    try:
        defaults = json.loads(args.defaults)
    except ValueError as e:
        parser.error(f"--defaults: {e}")
    if not isinstance(defaults, dict):
        parser.error("--defaults must be a JSON object")
    args.defaults = defaults
    if "--model" not in engine_argv and not any(a.startswith("--model=") for a in engine_argv):
        parser.error("--model is required (a vLLM engine argument)")
    return args, engine_argv


def main(
    argv: Sequence[str] | None = None,
    engine_factory: Callable[[Sequence[str]], Engine] = VllmEngine,
    prog: str = "python -m llmfleet.batch.runner",
) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args, engine_argv = parse_args(sys.argv[1:] if argv is None else argv, prog)
    cfg = ShardConfig(
        input=args.input,
        output_dir=args.output_dir,
        shard=args.shard,
        shards=args.shards,
        job=args.job,
        defaults=args.defaults,
        max_retries_per_line=args.max_retries_per_line,
        max_in_flight=max(1, args.max_in_flight),
        fsync_seconds=args.fsync_seconds,
        grace_seconds=args.grace_seconds,
    )
    progress = Progress(cfg.shard, cfg.shards)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.host, registry=progress.registry)
    stop = Stop()
    signal.signal(signal.SIGTERM, stop.on_signal)

    def load() -> Engine:
        with stop.interrupting():
            return engine_factory(engine_argv)

    started = time.monotonic()
    code, error = EXIT_OK, None
    try:
        if not cfg.input.is_file():
            raise OutputOwnedError(f"input file {cfg.input} does not exist")
        run_shard(cfg, load, progress, stop)
    except OutputOwnedError as e:
        code, error = EXIT_CONFIG, str(e)
    except StoppedError as e:
        code, error = EXIT_TERMINATED, f"terminated: {e}"
    except Exception as e:
        log.exception("shard %d failed", cfg.shard)
        code, error = EXIT_FAILED, f"{type(e).__name__}: {e}"
    report = progress.report(error)
    if args.termination_log is not None:
        try:
            args.termination_log.write_text(report.to_json())
        except OSError as e:
            log.warning("cannot write %s: %s", args.termination_log, e)
    summary = (
        f"shard {cfg.shard}/{cfg.shards}: {report.succeeded} answered, {report.failed} failed "
        f"of {report.total} lines in {time.monotonic() - started:.1f}s, "
        f"{report.tokens_per_second:.1f} generated tokens/s"
    )
    if error:
        log.error("%s; %s", summary, error)
    else:
        log.info("%s; output %s", summary, cfg.output)
    return code


if __name__ == "__main__":
    sys.exit(main())
