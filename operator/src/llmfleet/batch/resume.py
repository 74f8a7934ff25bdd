"""What a (re)started shard finds in its output directory.

* The owner file `.llmfleet-job.json` says which job (and shard count) writes the directory; a
  shard refuses a directory owned by another job, or written with another shard count (its lines
  would be split differently, and answered twice).
* The shard's output file: every complete line is a record already written and stays as is. A
  kill can leave a torn last line (no newline); it is cut off, and its request runs again.
* The attempts file `.shard-NNNNN-of-MMMMM.attempts`: line numbers appended (and fsynced) before
  they are submitted to the engine. A line charged more than maxRetriesPerLine + 1 attempts without
  a record is given an error record instead of running again. A stopping pod (SIGTERM) appends
  `-N` for a line it hands back unstarted (that submission never happened) and `~N` for one it
  was running (it was started, so running it again is work redone, but a stop is not the line's
  fault: no attempt is charged). Runners that predate the markers skip `~N` and count `-N`
  against line -N, which no input has.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmfleet.batch.records import line_of_record
from llmfleet.batch.sharding import output_name

OWNER_FILE = ".llmfleet-job.json"


class OutputOwnedError(Exception):
    """The job cannot run as configured: its output directory belongs to another job or shard
    count, or its input is missing. Retrying does not help."""


def claim_output(directory: Path, job: str, shards: int) -> None:
    """Make `directory` this job's, or raise OutputOwnedError. Safe when shards race: the owner
    file is created with an atomic link, and whoever loses reads the winner's."""
    directory.mkdir(parents=True, exist_ok=True)
    owner = directory / OWNER_FILE
    mine = {"job": job, "shards": shards}
    if not owner.exists():
        tmp = directory / f".{OWNER_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(mine) + "\n")
        try:
            os.link(tmp, owner)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    try:
        found: Any = json.loads(owner.read_text())
    except (OSError, ValueError) as e:
        raise OutputOwnedError(f"{directory}: unreadable {OWNER_FILE}: {e}") from e
    if not isinstance(found, dict) or found.get("job") != job:
        other = found.get("job") if isinstance(found, dict) else "?"
        raise OutputOwnedError(
            f"output directory {directory} belongs to job {other!r} ({OWNER_FILE}); "
            "choose another output path (or delete that job's results)"
        )
    if found.get("shards") != shards:
        raise OutputOwnedError(
            f"output directory {directory} holds results of this job split into "
            f"{found.get('shards')} shards; resume with shards: {found.get('shards')} "
            "or write to another output path"
        )


@dataclass
class Recovered:
    """The shard's output as found: which lines are answered, and the counts so far."""

    done: set[int] = field(default_factory=set)
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    torn_bytes: int = 0  # a partial last line cut off


def recover_output(path: Path) -> Recovered:
    out = Recovered()
    if not path.exists():
        return out
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        # A torn last line: the writer was killed mid-write. Cut it; its request runs again.
        out.torn_bytes = len(data) - end
        os.truncate(path, end)
        data = data[:end]
    for raw in data.splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        line = line_of_record(record)
        if line is None or line in out.done:
            continue
        out.done.add(line)
        if record.get("error"):
            out.failed += 1
            continue
        out.succeeded += 1
        usage = ((record.get("response") or {}).get("body") or {}).get("usage") or {}
        out.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        out.completion_tokens += int(usage.get("completion_tokens") or 0)
    return out


def attempts_name(shard: int, shards: int) -> str:
    return "." + output_name(shard, shards).removesuffix(".jsonl") + ".attempts"


class Attempts:
    """The shard's attempts file: what earlier pods handed to an engine, and this pod's own
    appends (each fsynced before the engine sees the line)."""

    def __init__(self, path: Path) -> None:
        self._submitted: Counter[int] = Counter()
        self._returned: Counter[int] = Counter()
        self._stopped: Counter[int] = Counter()
        data = path.read_bytes() if path.exists() else b""
        for raw in data.splitlines():
            self._count(raw.decode(errors="replace").strip())
        self._redone = sum(max(0, self._started(n) - 1) for n in self._submitted)
        self._path = path
        self._fd: int | None = None
        # A kill mid-append left a partial entry: the next entry must not extend it.
        self._torn = bool(data) and not data.endswith(b"\n")

    def _count(self, entry: str) -> None:
        counter = {"-": self._returned, "~": self._stopped}.get(entry[:1], self._submitted)
        number = entry[1:] if counter is not self._submitted else entry
        if number.isdigit():
            counter[int(number)] += 1

    def _started(self, line: int) -> int:
        return self._submitted[line] - self._returned[line]

    def charged(self, line: int) -> int:
        """Attempts that count against maxRetriesPerLine: the pod died with the line running."""
        return self._started(line) - self._stopped[line]

    @property
    def redone(self) -> int:
        """Submissions of lines an earlier submission had already started."""
        return self._redone

    def submit(self, lines: Iterable[int]) -> None:
        lines = list(lines)
        self._append("", lines)
        for n in lines:
            self._redone += self._started(n) >= 1
            self._submitted[n] += 1

    def returned(self, lines: Iterable[int]) -> None:
        """Lines handed back unstarted: as if never submitted."""
        lines = list(lines)
        self._append("-", lines)
        for n in lines:
            self._returned[n] += 1
            self._redone -= self._started(n) >= 1

    def stopped(self, lines: Iterable[int]) -> None:
        """Lines running when the pod was told to stop: not charged if they do not finish."""
        lines = list(lines)
        self._append("~", lines)
        for n in lines:
            self._stopped[n] += 1

    def _append(self, mark: str, lines: list[int]) -> None:
        data = "".join(f"{mark}{n}\n" for n in lines).encode()
        if not data:
            return
        if self._torn:
            data, self._torn = b"\n" + data, False
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, data)
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
