"""Where a model's config.json lives on the Hugging Face Hub, and the cache of those read: the
pure parts of reading it (the HTTP request is in llmfleet/hubclient.py).

A commit hash names one config.json for ever, so it is read once per process; a branch or tag
may move, so it is read again after `BRANCH_TTL_SECONDS`, and the copy read before keeps
serving while the Hub is out of reach: a deployment that planned once does not stop planning
because the Hub blinked.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from llmfleet.models.catalog import lookup_architecture
from llmfleet.models.model_spec import ModelSpec

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
BRANCH_TTL_SECONDS = 3600.0
# While the Hub is out of reach, a stale copy serves and the Hub is asked again this much later,
# not on every reconcile.
STALE_RETRY_SECONDS = 60.0
_COMMIT = re.compile(r"[0-9a-f]{40}")

Config = Mapping[str, Any]


def is_repo_id(name: str) -> bool:
    """Whether `name` is a Hub repo id (not a path in the container, nor an s3:// or gs:// URI)."""
    return not name.startswith("/") and "://" not in name


def needs_config(model: ModelSpec) -> bool:
    """Whether the planner needs `model`'s config.json and it can be read from the Hub: no
    architecture in the spec or the catalog, and a repo id."""
    return (
        model.architecture is None
        and lookup_architecture(model.name) is None
        and is_repo_id(model.name)
    )


def revision_of(model: ModelSpec) -> str:
    return model.revision or DEFAULT_REVISION


def described(model: ModelSpec) -> str:
    """`org/name@revision`, as status and errors name the config.json read."""
    return f"{model.name}@{revision_of(model)}"


def is_commit(revision: str) -> bool:
    return _COMMIT.fullmatch(revision) is not None


def config_url(endpoint: str, repo: str, revision: str) -> str:
    """The Hub's address of config.json at `revision` (as huggingface_hub's hf_hub_url builds it:
    the revision quoted whole, so refs/pr/1 stays one path segment)."""
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{quote(revision, safe='')}/config.json"


class HubError(Exception):
    """config.json could not be read from `url`."""

    def __init__(
        self, url: str, message: str, status: int | None = None, hub_code: str = ""
    ) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.hub_code = hub_code  # the Hub's X-Error-Code: RepoNotFound, RevisionNotFound, ...


class HubUnavailableError(HubError):
    """The Hub did not answer in time, or answered with a server error: try again later."""


class HubDeniedError(HubError):
    """401 or 403: the repo is gated or private and the token (or its absence) was refused."""


class HubNotFoundError(HubError):
    """404: no such repo, revision or file."""


class NotAConfigError(HubError):
    """The answer is not a JSON object."""


@dataclass(frozen=True)
class _Entry:
    config: Config
    read_at: float


class ConfigCache:
    """config.json per (endpoint, repo, revision), shared by every resource of the process."""

    def __init__(
        self, ttl: float = BRANCH_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str], _Entry] = {}

    def get(self, endpoint: str, repo: str, revision: str, read: Callable[[], Config]) -> Config:
        """The config.json cached for the key, or `read()` (which raises HubError) when there is
        none or a branch's copy is older than the TTL."""
        key = (endpoint.rstrip("/"), repo, revision)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and (is_commit(revision) or self._clock() - entry.read_at < self.ttl):
            return entry.config
        try:
            config = read()
        except HubUnavailableError:
            if entry is None:
                raise
            with self._lock:
                self._entries[key] = _Entry(
                    entry.config, self._clock() - self.ttl + STALE_RETRY_SECONDS
                )
            return entry.config
        with self._lock:
            self._entries[key] = _Entry(config, self._clock())
        return config
