"""Writing what a store sends into the fetch's temporary folder: each file under its relative
name only, counted against the fetch's byte limit as it streams (a store's listed sizes may be
missing or wrong), and a full volume told apart from a store's failure."""

from __future__ import annotations

import errno
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from llmfleet.fetcher.errors import NO_SPACE, FetchError, not_an_adapter, too_large
from llmfleet.fetcher.sources import relative_parts

ADAPTER_CONFIG = "adapter_config.json"
CHUNK = 1 << 20


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class Budget:
    """The bytes one fetch may still write: --max-bytes, for every file of the adapter."""

    def __init__(self, source: str, limit: int) -> None:
        self.source = source
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> None:
        self.used += size
        if self.used > self.limit:
            raise too_large(self.source, self.limit)


def destination(folder: Path, name: str, source: str) -> Path:
    """Where the file `name` of the adapter goes below `folder`; refused if the name could
    leave it."""
    parts = relative_parts(name)
    if parts is None:
        raise FetchError(
            502, f"{source} holds a file named {name!r}, which is not a plain relative path"
        )
    return folder.joinpath(*parts)


class _StreamReadError(Exception):
    """A read of the store's stream failed: the store's error, not the volume's."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def write(path: Path, stream: Readable, budget: Budget) -> int:
    """Copies `stream` into `path`; the bytes written. A failed read propagates as the store's
    client raised it (its caller classifies it); a failed write is the volume's."""
    written = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            while chunk := _read(stream):
                budget.take(len(chunk))
                out.write(chunk)
                written += len(chunk)
    except _StreamReadError as e:
        raise e.error from None
    except OSError as e:
        raise local_failure(budget.source, e) from None
    return written


def _read(stream: Readable) -> bytes:
    try:
        return stream.read(CHUNK)
    except Exception as e:
        raise _StreamReadError(e) from None


def local_failure(source: str, error: OSError) -> FetchError:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return FetchError(
            NO_SPACE,
            f"no space left on the adapter volume while fetching {source}: unload adapters "
            "no longer used (they are pruned) or give the volume more room",
        )
    return FetchError(500, f"could not write {source} to the adapter volume: {error}")


def require_adapter_config(names: Iterable[str], source: str) -> None:
    """Refuses a tree without adapter_config.json at its top before a byte is downloaded:
    vLLM would refuse it anyway, after the whole download."""
    if ADAPTER_CONFIG not in set(names):
        raise not_an_adapter(source)
