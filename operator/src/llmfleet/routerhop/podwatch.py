"""The engine pods, read from the Kubernetes API as vllm-router's discovery reads them: a list,
then a watch from its resourceVersion, again from a fresh list whenever the watch ends or fails.
It calls the API with the pod's ServiceAccount token (the router's Role: pods get, list, watch in
its namespace) over HTTPS with the cluster's CA, as any in-cluster client does, with aiohttp: the
official client is synchronous, and a thread per watch buys nothing here."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from .engines import EngineTable

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# The API server ends a watch after this; the hop then lists again, which also heals any event it
# may have missed. Below the API server's own --min-request-timeout (1800 s).
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 15.0
# A watch event is one line; a pod with many conditions and annotations runs to tens of KiB,
# past aiohttp's default line limit (64 KiB).
MAX_EVENT_BYTES = 4 << 20
GONE = 410


@dataclass(frozen=True)
class ApiAccess:
    server: str  # https://host:port
    token_file: Path
    ca_file: Path

    @staticmethod
    def in_cluster(account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiAccess:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host:  # IPv6
            host = f"[{host}]"
        return ApiAccess(f"https://{host}:{port}", account_dir / "token", account_dir / "ca.crt")

    def headers(self) -> dict[str, str]:
        # Read at each call: the kubelet rotates a projected token in place.
        return {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))


class WatchExpiredError(Exception):
    """The API server no longer has the watch's resourceVersion (410 Gone)."""


class PodWatch:
    """Keeps `table` equal to the pods of `namespace` that match `selector`."""

    def __init__(
        self,
        table: EngineTable,
        access: ApiAccess,
        namespace: str,
        selector: str,
        session: aiohttp.ClientSession,
    ) -> None:
        self.table, self.access, self.session = table, access, session
        self.url = f"{access.server}/api/v1/namespaces/{namespace}/pods"
        self.selector = selector
        # True: aiohttp's default checks, which an http:// URL (a test's fake API) never uses.
        self._ssl: ssl.SSLContext | bool = (
            access.ssl_context() if access.server.startswith("https:") else True
        )

    async def run(self) -> None:
        delay = RETRY_SECONDS
        while True:
            try:
                version = await self._list()
                delay = RETRY_SECONDS
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except WatchExpiredError:
                continue  # routine after a long watch: list again at once
            except Exception as e:  # the API server restarts, a token expires: list again
                log.warning("pod watch: %s; listing again in %.0f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(MAX_RETRY_SECONDS, delay * 2)

    async def _list(self) -> str:
        params = {"labelSelector": self.selector}
        async with self.session.get(
            self.url, params=params, headers=self.access.headers(), ssl=self._ssl
        ) as resp:
            if resp.status != 200:
                raise RuntimeError(f"list pods: HTTP {resp.status}: {(await resp.text())[:200]}")
            body = await resp.json()
        self.table.replace(body.get("items") or [])
        return str(body["metadata"]["resourceVersion"])

    async def _watch(self, version: str) -> None:
        params = {
            "labelSelector": self.selector,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_SECONDS + 30)
        async with self.session.get(
            self.url,
            params=params,
            headers=self.access.headers(),
            ssl=self._ssl,
            timeout=timeout,
            read_bufsize=MAX_EVENT_BYTES,
        ) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch pods: HTTP {resp.status}: {(await resp.text())[:200]}")
            async for line in resp.content:
                if line.strip():
                    self._event(json.loads(line))

    def _event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR" and obj.get("code") == GONE:
            raise WatchExpiredError()
        if kind == "ERROR":
            raise RuntimeError(f"watch pods: {obj.get('message') or obj}")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.table.apply(str(kind), obj)
