"""The adapter folders under the fetcher's root: fetched once each, in place whole or not at all,
and pruned when the operator no longer needs them.

A fetch downloads into `.tmp-<digest>-<random>` beside its final folder and renames it into
place once every file is written: the engine never sees half an adapter, and a fetch that
fails (or a fetcher killed mid-way) leaves no final folder behind, only a temporary one that
the next start or prune removes. Requests for what is already there answer at once; requests
for what is being fetched wait for that one fetch and get its answer.

The store keeps at most Limits.max_adapters folders holding at most Limits.max_total_bytes
together, temporary folders of fetches in flight included: the pod's volume has a sizeLimit
(render.fetcher) and the kubelet evicts the whole pod, engine and all, past it. A fetch that
would go beyond either is refused with 507 naming the limit; each fetch in flight reserves the
bytes it may write, so two at once cannot together overshoot."""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from llmfleet.fetcher.errors import NO_SPACE, TOO_LARGE, FetchError, not_an_adapter
from llmfleet.fetcher.files import ADAPTER_CONFIG, local_failure
from llmfleet.fetcher.paths import fetched_path
from llmfleet.fetcher.sources import HubSource, ObjectSource, parse

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
# fetched_path's folder names: prune removes nothing else, whatever else --dir holds.
_FETCHED = re.compile(r"[0-9a-f]{24}")
DEFAULT_MAX_BYTES = 8 << 30

# Downloads `source` into a folder that exists and is empty, writing at most `limit` bytes;
# the bytes written.
Download = Callable[[ObjectSource | HubSource, Path, int], int]


@dataclass(frozen=True)
class Limits:
    """What the store may hold: each adapter at most `max_bytes`, at most `max_adapters` of
    them, `max_total_bytes` together (None: no such cap)."""

    max_bytes: int
    max_adapters: int | None = None
    max_total_bytes: int | None = None


DEFAULT_LIMITS = Limits(DEFAULT_MAX_BYTES)


@dataclass
class _Flight:
    """A fetch in progress: the requests for the same key wait on `done`."""

    tmp_name: str
    reserved: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    error: FetchError | None = None


class AdapterStore:
    def __init__(self, root: Path, download: Download, limits: Limits | None = None) -> None:
        self.root = root.absolute()  # the engine is given these paths: never relative
        self.download = download
        self.limits = limits or DEFAULT_LIMITS
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}

    def start(self) -> None:
        """Creates the root; removes what a fetcher killed mid-fetch left (its temporary
        folders): nothing is in flight before the server starts."""
        self.root.mkdir(parents=True, exist_ok=True)
        for entry in self.root.iterdir():
            if entry.name.startswith(TMP_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)

    def fetch(self, source: object, revision: object) -> str:
        """The final folder of `source` at `revision`, fetched unless it is there already;
        raises FetchError."""
        try:
            parsed = parse(source, revision)
        except FetchError as e:
            log.warning("refused to fetch %r at revision %r: %s", source, revision, e.message)
            raise
        assert isinstance(source, str)
        assert revision is None or isinstance(revision, str)
        label = source if revision is None else f"{source} at revision {revision}"
        final = Path(fetched_path(source, revision, str(self.root)))
        with self._lock:
            flight = self._flights.get(final.name)
            leader = flight is None
            if flight is None:
                if final.is_dir():
                    return str(final)
                tmp_name = f"{TMP_PREFIX}{final.name}-{secrets.token_hex(4)}"
                reserved = self._room(label)
                flight = self._flights[final.name] = _Flight(tmp_name, reserved)
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return str(final)
        started, size = time.monotonic(), 0
        try:
            size = self._fetch(source, parsed, final, self.root / flight.tmp_name, flight.reserved)
        except FetchError as e:
            flight.error = e
            if e.status == TOO_LARGE and flight.reserved < self.limits.max_bytes:
                flight.error = self._volume_full(label, flight.reserved)
        except Exception as e:
            log.exception("fetching %s failed", source)
            flight.error = FetchError(500, f"fetching {source} failed unexpectedly: {e!r}")
        finally:
            with self._lock:
                del self._flights[final.name]
            flight.done.set()
        seconds = time.monotonic() - started
        if flight.error is not None:
            log.warning(
                "fetch of %s failed after %.1f s: %d %s",
                label,
                seconds,
                flight.error.status,
                flight.error.message,
            )
            raise flight.error
        log.info("fetched %s: %d bytes in %.1f s", label, size, seconds)
        return str(final)

    def _room(self, label: str) -> int:
        """The bytes a new fetch may write; raises FetchError (507) when the store is full.
        Called with the lock held."""
        limits = self.limits
        kept = [e for e in self.root.iterdir() if _FETCHED.fullmatch(e.name)]
        if (
            limits.max_adapters is not None
            and len(kept) + len(self._flights) >= limits.max_adapters
        ):
            raise FetchError(
                NO_SPACE,
                f"the adapter fetcher keeps at most {limits.max_adapters} fetched adapters per "
                f"engine pod (--max-adapters, which LLMFleet sets to spec.engine.lora."
                f"maxCpuAdapters) and holds {len(kept) + len(self._flights)}: {label} is not "
                "fetched. Fetch fewer s3://, gs:// or revisioned adapters, or raise "
                "maxCpuAdapters (the engine pods restart)",
            )
        if limits.max_total_bytes is None:
            return limits.max_bytes
        used = sum(_size(e) for e in kept) + sum(f.reserved for f in self._flights.values())
        room = limits.max_total_bytes - used
        if room <= 0:
            raise self._volume_full(label, 0)
        return min(limits.max_bytes, room)

    def _volume_full(self, label: str, room: int) -> FetchError:
        return FetchError(
            NO_SPACE,
            f"{label} does not fit in the engine pod's adapter volume: it holds at most "
            f"{self.limits.max_total_bytes} bytes of fetched adapters (--max-total-bytes, the "
            f"volume's sizeLimit, which LLMFleet derives from the model, spec.engine.lora.maxRank "
            f"and maxCpuAdapters) and {room} bytes were left. Is it an adapter of this model at "
            "a rank of at most maxRank?",
        )

    def _fetch(
        self, source: str, parsed: ObjectSource | HubSource, final: Path, tmp: Path, limit: int
    ) -> int:
        try:
            tmp.mkdir(parents=True)
            size = self.download(parsed, tmp, limit)
            if not (tmp / ADAPTER_CONFIG).is_file():
                raise not_an_adapter(source)
            os.rename(tmp, final)
        except OSError as e:
            raise local_failure(source, e) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already once renamed
        return size

    def prune(self, keep: Iterable[str]) -> list[str]:
        """Removes every fetched folder not in `keep` (paths as fetch answered them) and every
        temporary folder of no fetch in flight; the paths removed."""
        kept = {Path(p).name for p in keep if Path(p).parent == self.root}
        with self._lock:
            in_flight = {f.tmp_name for f in self._flights.values()}
            doomed = [
                entry
                for entry in sorted(self.root.iterdir())
                if entry.name not in kept
                and entry.name not in in_flight
                and (_FETCHED.fullmatch(entry.name) or entry.name.startswith(TMP_PREFIX))
            ]
        removed = []
        for entry in doomed:
            # Renamed away first, so that a fetch of the same key right now, which would find
            # the folder still there, cannot answer with a folder half removed.
            trash = entry.with_name(f"{TMP_PREFIX}pruned-{entry.name}-{secrets.token_hex(4)}")
            with self._lock:
                try:
                    entry.rename(trash)
                except OSError:
                    continue
            shutil.rmtree(trash, ignore_errors=True)
            removed.append(str(entry))
        if removed:
            log.info("pruned %d adapter folders: %s", len(removed), " ".join(removed))
        return removed


def _size(folder: Path) -> int:
    """The bytes of the files under `folder` (0 for what is gone meanwhile)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total
