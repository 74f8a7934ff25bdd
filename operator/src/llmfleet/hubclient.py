"""The one source of a model's config.json for the operator's reconciles and `llmfleet plan`:
read from the Hugging Face Hub, or from a mirror of it (HF_ENDPOINT), over HTTP with the
standard library (one GET with a timeout, the answer classified into the errors of
llmfleet.models.hub so that callers can tell a retry from a spec to fix) through a ConfigCache;
or from a file on this machine. Each caller says what a failure means to its own audience.

Not a call to a pod (reconcile/podcall.py): the Hub is the outside world, so it is named by
DNS, reached through the operator's HTTP(S)_PROXY when one is set, and may redirect."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llmfleet.models.hub import (
    DEFAULT_ENDPOINT,
    Config,
    ConfigCache,
    HubDeniedError,
    HubError,
    HubNotFoundError,
    HubUnavailableError,
    NotAConfigError,
    config_url,
    needs_config,
    revision_of,
)
from llmfleet.models.model_spec import ModelSpec

# A reconcile waits at most this long for the Hub; the reconcile is retried after a failure.
TIMEOUT_SECONDS = 5.0
# config.json files are a few KiB; anything this large is not one.
MAX_BYTES = 1 << 20


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
