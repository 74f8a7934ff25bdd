"""What a fetch request asks for, checked before anything is dialled: an object-store prefix
(s3://bucket/prefix, gs://bucket/prefix) or a Hugging Face repo at a revision. Everything else
is the user's to fix, answered 400 with what the fetcher takes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from llmfleet.fetcher.errors import bad_request
from llmfleet.fetcher.paths import OBJECT_STORE_SCHEMES

# S3's bucket naming rules (GCS's are a superset for dotted names, which fit here too).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,221}[a-z0-9]")
# The Hub's repo ids: a name, or an owner and a name.
_REPO = re.compile(r"(?:[\w.\-]{1,96}/)?[\w.\-]{1,96}")
# Branch, tag or commit; git refs may hold a slash (refs/pr/1), never whitespace or controls.
_REVISION = re.compile(r"[^\s\x00-\x1f\x7f]{1,256}")
_TAKES = "s3://bucket/prefix, gs://bucket/prefix or a Hugging Face repo with a revision"


@dataclass(frozen=True)
class ObjectSource:
    scheme: str  # "s3" or "gs"
    bucket: str
    prefix: str  # "" or ends with "/": every object under it is part of the adapter

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}"


@dataclass(frozen=True)
class HubSource:
    repo: str
    revision: str


def parse(source: object, revision: object) -> ObjectSource | HubSource:
    """The request's source and revision, or a 400 FetchError saying what is wrong."""
    if not isinstance(source, str) or not source:
        raise bad_request(f"source must be a non-empty string ({_TAKES}), not {source!r}")
    if revision is not None and not isinstance(revision, str):
        raise bad_request(f"revision of {source} must be a string or null, not {revision!r}")
    if source.startswith(OBJECT_STORE_SCHEMES):
        if revision is not None:
            raise bad_request(
                f"{source}: a revision applies only to Hugging Face repos; an object-store "
                "prefix has none (put each version under a prefix of its own)"
            )
        return _object_source(source)
    if source.startswith(("/", ".", "~")) or "://" in source:
        raise bad_request(
            f"{source}: the fetcher takes {_TAKES}; a local path or another scheme is not "
            "fetched (vLLM loads local paths itself)"
        )
    if not _REPO.fullmatch(source) or ".." in source or "--" in source:
        raise bad_request(f"{source}: not a Hugging Face repo id (owner/name)")
    if revision is None:
        raise bad_request(
            f"{source}: without a revision a Hub repo is vLLM's to download, not the "
            "fetcher's; give a revision (a branch, tag or commit) to fetch it here"
        )
    if not _REVISION.fullmatch(revision):
        raise bad_request(
            f"{source}: revision {revision!r} is not a branch, tag or commit (1-256 "
            "characters, no whitespace)"
        )
    return HubSource(source, revision)


def _object_source(source: str) -> ObjectSource:
    scheme, rest = source.split("://", 1)
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise bad_request(f"{source}: {bucket!r} is not a bucket name ({scheme}://bucket/prefix)")
    prefix = prefix.strip("/")
    if prefix and relative_parts(prefix) is None:
        raise bad_request(f"{source}: the prefix may not hold empty, '.' or '..' segments")
    return ObjectSource(scheme, bucket, f"{prefix}/" if prefix else "")


def relative_parts(name: str) -> tuple[str, ...] | None:
    """The segments of a relative file name, or None when it could leave its folder (an
    absolute path, '..') or is not a plain path ('.', empty segments): object keys and Hub file
    names come from outside, and must not write anywhere but below the adapter's folder."""
    parts = tuple(name.split("/"))
    if not name or any(p in ("", ".", "..") or "\x00" in p for p in parts):
        return None
    return parts if PurePosixPath(name).parts == parts else None
