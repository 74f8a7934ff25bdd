"""The operator's side of the adapter fetcher (llmfleet.fetcher, a container beside each
single-node LoRA engine): asking it to copy an s3://, gs:// or revisioned Hub adapter into the
pod before vLLM loads it, and to drop the copies no adapter needs any more. Every call carries
the LLMDeployment's fetcher token (reconcile.llmdeployment.fetcher_token): the fetcher answers
nobody else."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from llmfleet.fetcher.paths import FETCHER_PORT
from llmfleet.reconcile.machinery.podcall import call, pod_url
from llmfleet.reconcile.machinery.secrets import BearerToken
from llmfleet.render.fetcher import FETCHER_CONTAINER, fetcher_secret_name

log = logging.getLogger(__name__)

# An adapter of a big model is a few GiB; the reconcile waits for it as it does for vLLM
# downloading a Hub adapter.
FETCH_TIMEOUT_SECONDS = 300.0
PRUNE_TIMEOUT_SECONDS = 10.0
REFUSED = (
    "the adapter fetcher refused the operator's token: the pod holds the token its "
    f"LLMDeployment's Secret (<name>{fetcher_secret_name('')}) held when the pod started, and "
    "the operator's key changed since (its key Secret was replaced, or it runs outside a cluster "
    "without one): delete that Secret, then the engine pods once the operator has created it again"
)
NO_FETCHER = (
    "s3://, gs:// and revisioned sources are copied in by the engine pod's adapter fetcher, "
    "which this engine pod does not run: multi-node (LeaderWorkerSet) replicas read adapters "
    "only from a path (spec.engine.lora.claim) or a Hub repo at main"
)


class FetcherApi(Protocol):
    def fetch(self, ip: str, token: BearerToken, source: str, revision: str | None) -> str | None:
        """None once the adapter is in the pod, else why not."""

    def prune(self, ip: str, token: BearerToken, keep: Iterable[str]) -> None:
        """Drops every fetched adapter but `keep` (paths); best effort."""


def has_fetcher(pod: dict[str, Any]) -> bool:
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(c.get("name") == FETCHER_CONTAINER for c in containers)


def _post(
    ip: str, token: BearerToken, path: str, body: dict[str, Any], timeout: float
) -> tuple[int, str]:
    base = pod_url(ip, FETCHER_PORT)
    if base is None:
        return 0, f"no address {ip!r}"
    return call(f"{base}{path}", body, timeout, token.headers())


class HttpFetcherApi:
    def fetch(self, ip: str, token: BearerToken, source: str, revision: str | None) -> str | None:
        body = {"source": source, "revision": revision}
        try:
            status, text = _post(ip, token, "/v1/fetch", body, FETCH_TIMEOUT_SECONDS)
        except OSError as e:
            return f"the adapter fetcher did not answer: {e}"
        if status == 200:
            return None
        if status == 401:
            return REFUSED
        try:
            return str(json.loads(text)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            return f"the adapter fetcher answered HTTP {status}: {text.strip()[:300]}"

    def prune(self, ip: str, token: BearerToken, keep: Iterable[str]) -> None:
        body = {"keep": sorted(keep)}
        try:
            status, text = _post(ip, token, "/v1/prune", body, PRUNE_TIMEOUT_SECONDS)
        except OSError as e:
            status, text = 0, str(e)
        if status != 200:
            # Left for the next removal: the copies only take disk.
            log.info("adapter fetcher at %s did not prune: %s %s", ip, status, text[:200])
