"""Run one shard of a batch: `python3 -m llmfleet.batch.runner --input F --output-dir D
--shards N [--shard K] [runner options] <vLLM engine arguments>`.

In an Indexed Job the shard is the pod's JOB_COMPLETION_INDEX. The runner

1. claims the output directory for its job (refusing one another job owns: exit 3),
2. reads its share of the input (`sharding`), and what its output file already answers
   (`resume`: a torn last line is cut, answered lines are skipped),
3. writes error records for lines that cannot run, then loads the model once and keeps the engine
   fed: up to --max-in-flight requests are queued at any time (far more than the engine runs at
   once, so continuous batching stays full), refilled as results come back,
4. appends each record as its request finishes (flushed at once, fsynced at least every
   --fsync-seconds and at the end), and serves its progress on /metrics.

It ends with exit 0 when every line has a record (failed lines included), and writes a JSON
summary to --termination-log, which Kubernetes shows in the pod status.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from llmfleet.batch.engine import Engine, RequestRejectedError, VllmEngine
from llmfleet.batch.progress import Progress
from llmfleet.batch.records import (
    ENGINE_ERROR,
    RETRIES_EXHAUSTED,
    LineError,
    Request,
    encode,
    error_record,
    sampling_kwargs,
    success_record,
)
from llmfleet.batch.resume import (
    AttemptLog,
    OutputOwnedError,
    attempts_name,
    claim_output,
    read_attempts,
    recover_output,
)
from llmfleet.batch.sharding import output_name, read_shard
from llmfleet.shard_report import METRICS_PORT

log = logging.getLogger("llmfleet.batch")

EXIT_OK = 0
EXIT_FAILED = 1  # worth a retry (the Job restarts the shard)
EXIT_CONFIG = 3  # retrying cannot help (the Job fails at once)
EXIT_TERMINATED = 143
DEFAULT_MAX_IN_FLIGHT = 1024
DEFAULT_FSYNC_SECONDS = 1.0
PUBLISH_SECONDS = 1.0


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

    @property
    def output(self) -> Path:
        return self.output_dir / output_name(self.shard, self.shards)

    @property
    def attempts(self) -> Path:
        return self.output_dir / attempts_name(self.shard, self.shards)


class _Writer:
    """Appends whole records: one write() per line, flushed at once, fsynced periodically."""

    def __init__(self, path: Path, fsync_seconds: float) -> None:
        self._f: IO[bytes] = path.open("ab")
        self._fsync_seconds = fsync_seconds
        self._synced = time.monotonic()

    def write(self, record: Mapping[str, Any]) -> None:
        self._f.write(encode(record))
        self._f.flush()
        if time.monotonic() - self._synced >= self._fsync_seconds:
            self.sync()

    def sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._synced = time.monotonic()

    def close(self) -> None:
        self.sync()
        self._f.close()


class StoppedError(Exception):
    """SIGTERM: stop taking work; what is written stays, the rest runs after a restart."""


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
    attempts = read_attempts(cfg.attempts)
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
    writer = _Writer(cfg.output, cfg.fsync_seconds)
    try:
        for error in shard.errors:
            if error.line not in found.done:
                writer.write(error_record(error))
                progress.errored()
        todo: deque[Request] = deque()
        for request in shard.requests:
            if request.line in found.done:
                continue
            if attempts[request.line] > cfg.max_retries_per_line:
                writer.write(error_record(_exhausted(request, attempts[request.line])))
                progress.errored()
            else:
                todo.append(request)
        progress.publish()
        if todo:
            _run(cfg, engine_factory(), todo, writer, progress, should_stop=should_stop)
    finally:
        writer.close()
        progress.publish()
    return progress


def _exhausted(request: Request, attempts: int) -> LineError:
    return LineError(
        request.line,
        request.custom_id,
        RETRIES_EXHAUSTED,
        f"line {request.line}: not run again after {attempts} attempts; its shard stopped "
        "while running it each time (maxRetriesPerLine)",
    )


def _run(
    cfg: ShardConfig,
    engine: Engine,
    todo: deque[Request],
    writer: _Writer,
    progress: Progress,
    *,
    should_stop: Callable[[], bool],
) -> None:
    attempt_log = AttemptLog(cfg.attempts)
    in_flight: dict[int, Request] = {}
    progress.engine_started = time.monotonic()
    published = time.monotonic()
    try:
        while todo or in_flight:
            if should_stop():
                raise StoppedError
            if todo and len(in_flight) < cfg.max_in_flight:
                batch = [
                    todo.popleft()
                    for _ in range(min(len(todo), cfg.max_in_flight - len(in_flight)))
                ]
                attempt_log.record(r.line for r in batch)  # durable before the engine sees them
                for request in batch:
                    try:
                        engine.submit(request, sampling_kwargs(request, cfg.defaults))
                    except RequestRejectedError as e:
                        writer.write(error_record(_engine_error(request, str(e))))
                        progress.errored()
                        continue
                    in_flight[request.line] = request
            if not in_flight:
                continue
            for finished in engine.step():
                request = in_flight.pop(finished.line)
                if finished.completion is None:
                    writer.write(error_record(_engine_error(request, finished.error or "failed")))
                    progress.errored()
                    continue
                writer.write(success_record(request, finished.completion, engine.model_name))
                progress.answered(
                    finished.completion.prompt_tokens, finished.completion.completion_tokens
                )
            if time.monotonic() - published >= PUBLISH_SECONDS:
                progress.publish()
                published = time.monotonic()
            if in_flight and not engine.has_unfinished():
                raise RuntimeError(f"the engine lost {len(in_flight)} requests")
    finally:
        attempt_log.close()


def _engine_error(request: Request, message: str) -> LineError:
    return LineError(
        request.line, request.custom_id, ENGINE_ERROR, f"line {request.line}: {message}"
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
    )
    progress = Progress(cfg.shard, cfg.shards)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.host, registry=progress.registry)
    stop = {"requested": False}

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    code, error = EXIT_OK, None
    try:
        if not cfg.input.is_file():
            raise OutputOwnedError(f"input file {cfg.input} does not exist")
        run_shard(cfg, lambda: engine_factory(engine_argv), progress, lambda: stop["requested"])
    except OutputOwnedError as e:
        code, error = EXIT_CONFIG, str(e)
    except StoppedError:
        code, error = EXIT_TERMINATED, "terminated; the shard resumes from its output"
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
