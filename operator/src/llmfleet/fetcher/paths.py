"""Where a fetched adapter lives: the same path in the fetcher's and the engine's container (both
mount the pod's adapter volume at FETCH_ROOT), named by a digest of what was asked for, so the
operator knows an adapter's path without asking the fetcher (e.g. after a restart, to compare it
with what vLLM's /v1/models lists)."""

from __future__ import annotations

import hashlib

FETCH_ROOT = "/var/lib/llmfleet/adapters"
FETCHER_PORT = 8081
# The environment variable of the fetcher container that holds the operator's token.
TOKEN_ENV = "LLMFLEET_FETCHER_TOKEN"
OBJECT_STORE_SCHEMES = ("s3://", "gs://")


def needs_fetch(source: str, revision: str | None) -> bool:
    """Whether vLLM cannot load `source` itself: an object-store URI, or a Hub repo at a
    revision (vLLM's load_lora_adapter takes no revision)."""
    return source.startswith(OBJECT_STORE_SCHEMES) or revision is not None


def fetched_path(source: str, revision: str | None, root: str = FETCH_ROOT) -> str:
    digest = hashlib.sha256(f"{source}\n{revision or ''}".encode()).hexdigest()[:24]
    return f"{root.rstrip('/')}/{digest}"
