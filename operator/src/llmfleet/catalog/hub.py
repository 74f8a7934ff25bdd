"""A model's config.json on the Hugging Face Hub: the one place that reads it, for the operator's
reconciles and `llmfleet plan`.

Where it lives (`config_url`), which models need it (`needs_config`), and the cache of those
read: a commit hash names one config.json for ever, so it is read once per process; a branch or
tag may move, so it is read again after `BRANCH_TTL_SECONDS`, and the copy read before keeps
serving while the Hub is out of reach: a deployment that planned once does not stop planning
because the Hub blinked.

It is read from the Hub, or from a mirror of it (HF_ENDPOINT), over HTTP with the standard
library (one GET with a timeout, the answer classified into the HubError kinds below so that
callers can tell a retry from a spec to fix), or from a file on this machine. Each caller says
what a failure means to its own audience.

Not a call to a pod (reconcile/machinery/podcall.py): the Hub is the outside world, so it is
named by DNS, reached through the operator's HTTP(S)_PROXY when one is set, and may redirect.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.models.model_spec import ModelSpec

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
BRANCH_TTL_SECONDS = 3600.0
# While the Hub is out of reach, a stale copy serves and the Hub is asked again this much later,
# not on every reconcile.
STALE_RETRY_SECONDS = 60.0
# A reconcile waits at most this long for the Hub; the reconcile is retried after a failure.
TIMEOUT_SECONDS = 5.0
# config.json files are a few KiB; anything this large is not one.
MAX_BYTES = 1 << 20
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


def endpoint_from_env() -> str:
    """The Hub's address as huggingface_hub and vLLM take it: env HF_ENDPOINT, else the Hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects (a renamed repo), but sends the token only to the host it was meant
    for: the standard library would pass it to any host a redirect names."""

    def redirect_request(  # noqa: PLR0917 (the standard library's signature)
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc != urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def read_config(url: str, token: str | None = None, timeout: float = TIMEOUT_SECONDS) -> Config:
    """The JSON object at `url` (a config.json), or a HubError saying why not."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(TokenStaysHome)
    try:
        with opener.open(request, timeout=timeout) as answer:
            body = answer.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as error:
        raise _refusal(url, error) from None
    except (OSError, http.client.HTTPException, ValueError) as error:
        # Refused or reset connections, DNS, TLS, timeouts; ValueError: a malformed endpoint.
        reason = getattr(error, "reason", None) or error
        raise HubUnavailableError(url, f"no answer from {url} ({reason})") from None
    if len(body) > MAX_BYTES:
        raise NotAConfigError(url, f"{url} is larger than {MAX_BYTES} bytes: not a config.json")
    try:
        config = json.loads(body)
    except ValueError:
        raise NotAConfigError(url, f"{url} is not JSON: not a config.json") from None
    if not isinstance(config, dict):
        raise NotAConfigError(url, f"{url} is not a JSON object: not a config.json")
    return config


def load_config_file(path: Path) -> Config:
    """A config.json on this machine; OSError, or ValueError when it is not a JSON object."""
    config = json.loads(path.read_text())
    if not isinstance(config, dict):
        raise ValueError("not a JSON object, so not a config.json")
    return config


Reader = Callable[[str, str | None], Config]


class ConfigSource:
    """config.json of the models the planner needs one for, from one endpoint, through one
    cache shared by every caller of the process."""

    def __init__(
        self, endpoint: str, cache: ConfigCache | None = None, read: Reader = read_config
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.cache = cache or ConfigCache()
        self._read = read

    def for_model(self, model: ModelSpec, token: Callable[[], str | None]) -> Config | None:
        """`model`'s config.json when the planner needs it, else None; raises HubError.
        `token` is asked only when the Hub is."""
        if not needs_config(model):
            return None
        revision = revision_of(model)
        url = config_url(self.endpoint, model.name, revision)
        return self.cache.get(self.endpoint, model.name, revision, lambda: self._read(url, token()))


def _refusal(url: str, error: urllib.error.HTTPError) -> HubError:
    code = error.code
    # The Hub says which of repo, revision and file it did not find, or why it refused.
    hub_code = error.headers.get("X-Error-Code") or ""
    said = error.headers.get("X-Error-Message") or hub_code
    text = f"{url} answered {code} {error.reason}" + (f" ({said})" if said else "")
    if code in (401, 403):
        return HubDeniedError(url, text, code, hub_code)
    if code == 404:
        return HubNotFoundError(url, text, code, hub_code)
    # 429 and server errors pass; so, for all the operator can do, does anything else.
    return HubUnavailableError(url, text, code, hub_code)
