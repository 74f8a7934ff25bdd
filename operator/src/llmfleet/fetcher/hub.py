"""Fetching a Hugging Face repo at a revision over the Hub's HTTP API, with the standard library,
as huggingface_hub's snapshot_download does: the revision's file list from
`{HF_ENDPOINT}/api/models/{repo}/revision/{revision}`, then each file from
`{HF_ENDPOINT}/{repo}/resolve/{commit}/{file}`, at the commit the revision named when it was
listed, so that a branch moving mid-fetch cannot mix two commits' files. HF_ENDPOINT (a mirror)
and HF_TOKEN (gated and private repos) come from the environment, as vLLM takes them; the token
is sent to the Hub's host only, never to the CDN host its downloads redirect to."""

from __future__ import annotations

import http.client
import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from llmfleet.catalog.hub import TokenStaysHome, endpoint_from_env
from llmfleet.fetcher.errors import BAD_GATEWAY, FORBIDDEN, NOT_FOUND, FetchError
from llmfleet.fetcher.files import Budget, destination, require_adapter_config, write
from llmfleet.fetcher.sources import HubSource

# A socket read waits at most this long; a whole file takes what its size needs.
TIMEOUT_SECONDS = 60.0
# The revision's file list is JSON of a few KiB per hundred files.
MAX_INFO_BYTES = 16 << 20
_COMMIT = re.compile(r"[0-9a-f]{40}")
# The Hub's X-Error-Code values that say what it did not find.
_NOT_FOUND_CODES = frozenset({"RepoNotFound", "RevisionNotFound", "EntryNotFound"})


@dataclass(frozen=True)
class Hub:
    endpoint: str
    token: str | None = None
    timeout: float = TIMEOUT_SECONDS

    @classmethod
    def from_env(cls) -> Hub:
        return cls(endpoint_from_env(), os.environ.get("HF_TOKEN") or None)

    def info_url(self, source: HubSource) -> str:
        revision = quote(source.revision, safe="")
        return f"{self.endpoint}/api/models/{source.repo}/revision/{revision}"

    def file_url(self, source: HubSource, commit: str, name: str) -> str:
        return f"{self.endpoint}/{source.repo}/resolve/{quote(commit, safe='')}/{quote(name)}"

    def fetch(self, source: HubSource, folder: Path, limit: int) -> int:
        """Downloads every file of the repo at the revision into `folder`; the bytes written."""
        label = f"{source.repo} at revision {source.revision}"
        info = self._info(source, label)
        names = [s["rfilename"] for s in info.get("siblings") or [] if isinstance(s, dict)]
        if not all(isinstance(n, str) for n in names):
            raise FetchError(BAD_GATEWAY, f"{self.info_url(source)} listed a file without a name")
        require_adapter_config(names, label)
        sha = info.get("sha")
        commit = sha if isinstance(sha, str) and _COMMIT.fullmatch(sha) else source.revision
        budget = Budget(label, limit)
        for name in names:
            url = self.file_url(source, commit, name)
            path = destination(folder, name, label)
            with self._open(url, label) as answer:
                try:
                    write(path, answer, budget)
                except (OSError, http.client.HTTPException) as e:
                    raise unreachable(url, e) from None
        return budget.used

    def _info(self, source: HubSource, label: str) -> dict[str, Any]:
        url = self.info_url(source)
        with self._open(url, label) as answer:
            try:
                body = answer.read(MAX_INFO_BYTES + 1)
            except (OSError, http.client.HTTPException) as e:
                raise unreachable(url, e) from None
        try:
            info = json.loads(body)
        except ValueError:
            info = None
        if not isinstance(info, dict) or len(body) > MAX_INFO_BYTES:
            raise FetchError(BAD_GATEWAY, f"{url} did not answer a JSON object: is it a Hub?")
        return info

    def _open(self, url: str, label: str) -> http.client.HTTPResponse:
        request = urllib.request.Request(url)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        # The Hub, not a pod (reconcile/machinery/podcall.py): a name, the pod's proxy if set,
        # redirects.
        opener = urllib.request.build_opener(TokenStaysHome)
        try:
            answer: http.client.HTTPResponse = opener.open(request, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            e.close()
            raise refusal(label, url, e.code, e.headers.get("X-Error-Code") or "") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise unreachable(url, e) from None
        return answer


def refusal(label: str, url: str, status: int, hub_code: str) -> FetchError:
    """The FetchError for the Hub's error answer; `hub_code` is its X-Error-Code."""
    said = f"{status}" + (f" {hub_code}" if hub_code else "")
    if hub_code == "GatedRepo" or (status in (401, 403) and hub_code not in _NOT_FOUND_CODES):
        return FetchError(
            FORBIDDEN,
            f"the Hub refused {label} ({said}): the repo is gated/private: give a token that "
            "may read it in spec.model.tokenSecretRef (and accept its terms on the Hub)",
        )
    if status in (401, 404) or hub_code in _NOT_FOUND_CODES:
        # Without a token the Hub answers 401 for a missing repo as for a private one.
        return FetchError(
            NOT_FOUND,
            f"the Hub has no {label} ({said}): check the repo id and the revision (if the "
            "repo is private, spec.model.tokenSecretRef needs a token that may read it)",
        )
    return FetchError(BAD_GATEWAY, f"the Hub answered {said} for {url}: a retry may succeed")


def unreachable(url: str, error: BaseException) -> FetchError:
    reason = getattr(error, "reason", None) or error
    return FetchError(BAD_GATEWAY, f"no answer from {url} ({reason}): a retry may succeed")
