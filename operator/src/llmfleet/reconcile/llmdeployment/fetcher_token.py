"""The token that lets the operator, and nobody else, ask an LLMDeployment's adapter fetchers to
fetch or prune (llmfleet.fetcher.server refuses every other caller).

Each LLMDeployment's token is an HMAC, under the operator's key, of its namespace and name, and
lives in a Secret named after it (render.fetcher.fetcher_secret_name) that the operator creates
once, owned by the LLMDeployment, and the fetcher container reads as an environment variable.
Derived rather than random so that the operator never reads a Secret of the namespaces it
serves: the chart grants it `create` on Secrets there, and `get` only on its own key's Secret in
its own namespace (as it does for its Lease). Every replica and every restart derives the same
tokens from that key.

Standby engines' dev-mode fence (llmfleet.devfence) takes a token made the same way, of a
different message (the purpose, "standby"), in a Secret of its own (render.standby).

The key Secret is created by the first replica that finds none; without a namespace for it
(the operator outside a cluster with --no-leader-election) the key is this process's own, and
fetchers whose Secret an earlier process created refuse it until the Secret is deleted."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from llmfleet import metrics_reconcile
from llmfleet.reconcile.machinery.secrets import BearerToken
from llmfleet.render import Owner
from llmfleet.render.fetcher import TOKEN_KEY, fetcher_secret_name
from llmfleet.render.names import COMPONENT_ENGINE, metadata

log = logging.getLogger(__name__)

KEY_FIELD = "key"
KEY_BYTES = 32
TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class KeySecret:
    """Where the operator's key lives: a Secret in the operator's namespace."""

    namespace: str
    name: str


class FetcherTokens:
    def __init__(self, core: k8s.CoreV1Api, where: KeySecret | None) -> None:
        self._core = core
        self._where = where
        self._lock = threading.Lock()
        self._key: bytes | None = None if where is not None else secrets.token_bytes(KEY_BYTES)
        # (namespace, name, uid, Secret) of the token Secrets that exist
        self._created: set[tuple[str, str, str, str]] = set()

    def token(self, namespace: str, name: str, purpose: str = "") -> BearerToken:
        """The token of one LLMDeployment's fetchers (no purpose) or of another of its
        operator-only endpoints (`purpose`: "standby")."""
        message = f"{namespace}/{name}" + (f"/{purpose}" if purpose else "")
        digest = hmac.new(self._operator_key(), message.encode(), hashlib.sha256)
        return BearerToken(digest.hexdigest())

    def ensure_secret(self, owner: Owner, purpose: str = "", secret_name: str = "") -> None:
        """Creates the LLMDeployment's token Secret (the fetchers' unless `purpose` and
        `secret_name` say another) unless it exists; an existing one is kept as it is (the
        operator may not read it, and wrote it with the same token)."""
        name = secret_name or fetcher_secret_name(owner.name)
        if (owner.namespace, owner.name, owner.uid, name) in self._created:
            return
        token = self.token(owner.namespace, owner.name, purpose)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata(owner, name, COMPONENT_ENGINE),
            "type": "Opaque",
            "data": {TOKEN_KEY: base64.b64encode(token.value.encode()).decode()},
        }
        try:
            self._core.create_namespaced_secret(
                owner.namespace, body, _preload_content=False, _request_timeout=TIMEOUT_SECONDS
            ).release_conn()
            metrics_reconcile.count_write("create", "Secret")
        except ApiException as e:
            if e.status != 409:
                raise _named(e, f"Secret {owner.namespace}/{name}") from None
        self._created.add((owner.namespace, owner.name, owner.uid, name))

    def forget(self, namespace: str, name: str) -> None:
        """The LLMDeployment is gone: its Secret goes with it (owner reference), and one of the
        same name made later needs a new one."""
        self._created = {c for c in self._created if c[:2] != (namespace, name)}

    def _operator_key(self) -> bytes:
        with self._lock:
            if self._key is None:
                assert self._where is not None
                self._key = self._read_or_create(self._where)
            return self._key

    def _read_or_create(self, where: KeySecret) -> bytes:
        for _ in range(2):
            key = self._read(where)
            if key is not None:
                return key
            fresh = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": where.name, "namespace": where.namespace},
                "type": "Opaque",
                "data": {KEY_FIELD: fresh},
            }
            try:
                self._core.create_namespaced_secret(
                    where.namespace, body, _preload_content=False, _request_timeout=TIMEOUT_SECONDS
                ).release_conn()
                metrics_reconcile.count_write("create", "Secret")
                log.info("created the operator's fetcher key in Secret %s/%s", *_at(where))
                return base64.b64decode(fresh)
            except ApiException as e:
                if e.status != 409:  # 409: another replica created it first; read theirs
                    raise _named(e, f"Secret {where.namespace}/{where.name}") from None
        raise RuntimeError(f"Secret {where.namespace}/{where.name} keeps vanishing")

    def _read(self, where: KeySecret) -> bytes | None:
        try:
            response = self._core.read_namespaced_secret(
                where.name,
                where.namespace,
                _preload_content=False,
                _request_timeout=TIMEOUT_SECONDS,
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise _named(e, f"Secret {where.namespace}/{where.name}") from None
        try:
            data = json.loads(response.data).get("data") or {}
        finally:
            response.release_conn()
        encoded = data.get(KEY_FIELD)
        if not encoded:
            raise RuntimeError(f"Secret {where.namespace}/{where.name} has no key {KEY_FIELD}")
        return base64.b64decode(encoded)


def _at(where: KeySecret) -> tuple[str, str]:
    return where.namespace, where.name


def _named(e: ApiException, what: str) -> ApiException:
    """The API's error with its body dropped (a Secret's body holds its value)."""
    return ApiException(status=e.status, reason=f"{e.reason} ({what})")
