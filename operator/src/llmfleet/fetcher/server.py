"""The fetcher's HTTP API, which the operator calls over the pod's IP:

- `GET /healthz`: 200 `{"status": "ok"}` once the server runs.
- `POST /v1/fetch` `{"source": str, "revision": str | null}`: 200 `{"path": ...}` once every
  file of the adapter is in place under that path (fetched_path: the operator knows it
  already); a large adapter takes as long as its download. Errors answer
  `{"error": {"message": ...}}` with the status of llmfleet.fetcher.errors.
- `POST /v1/prune` `{"keep": [path, ...]}`: 200 `{"removed": [path, ...]}`, every fetched
  folder not kept removed.

Each request runs on a thread of its own (a fetch may take minutes, and a health probe must not
wait behind it).

Only the operator may fetch or prune: both answer 401 unless the request carries
`Authorization: Bearer <token>`, the token of the LLMDeployment's Secret that the pod's
TOKEN_ENV holds (docs/security.md). A fetch spends the object store's keys and the Hub token
and writes to the node's disk, so nobody else who reaches the port may ask for one. /healthz
stays open: the kubelet's probe carries no token."""

from __future__ import annotations

import hmac
import json
import logging
import os
import signal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from llmfleet.fetcher.errors import BAD_REQUEST, FetchError
from llmfleet.fetcher.hub import Hub
from llmfleet.fetcher.objectstore import DEFAULT_GS_ENDPOINT, ObjectStores, StoreConfig
from llmfleet.fetcher.paths import TOKEN_ENV
from llmfleet.fetcher.sources import HubSource, ObjectSource
from llmfleet.fetcher.store import DEFAULT_LIMITS, AdapterStore, Download, Limits

log = logging.getLogger(__name__)

# The request bodies are a source and a revision, or the paths to keep: small.
MAX_BODY_BYTES = 1 << 20


class FetcherServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], store: AdapterStore, token: str) -> None:
        if not token:
            # An empty token would let `Bearer ` through: refuse to serve at all instead.
            raise ValueError(f"the fetcher needs the operator's token in {TOKEN_ENV}")
        super().__init__(address, _Handler)
        self.store = store
        self.token = token.encode()

    def authorized(self, header: str | None) -> bool:
        scheme, _, given = (header or "").partition(" ")
        # Constant-time: the answer's timing must not tell a caller how much of a guess was right.
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token
        )

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: FetcherServer

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._answer(200, {"status": "ok"})
        else:
            self._error(404, f"no {self.path} here: GET /healthz, POST /v1/fetch, POST /v1/prune")

    def do_POST(self) -> None:
        routes = {"/v1/fetch": self._fetch, "/v1/prune": self._prune}
        route = routes.get(self.path)
        if route is None:
            self._error(404, f"no {self.path} here: POST /v1/fetch or /v1/prune")
            return
        if not self.server.authorized(self.headers.get("Authorization")):
            # Nothing of the request is read or logged: the body may name a private source.
            self._error(401, "only the operator may ask the adapter fetcher: no valid bearer token")
            return
        try:
            self._answer(200, route(self._body()))
        except FetchError as e:
            self._error(e.status, e.message)

    def _fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(body) - {"source", "revision"})
        if unknown:
            raise FetchError(BAD_REQUEST, f"unknown fields {unknown}: source, revision")
        return {"path": self.server.store.fetch(body.get("source"), body.get("revision"))}

    def _prune(self, body: dict[str, Any]) -> dict[str, Any]:
        keep = body.get("keep")
        if not isinstance(keep, list) or not all(isinstance(p, str) for p in keep):
            raise FetchError(BAD_REQUEST, f"keep must be a list of paths, not {keep!r}")
        return {"removed": self.server.store.prune(keep)}

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY_BYTES:
            raise FetchError(BAD_REQUEST, f"a JSON body of 1 to {MAX_BODY_BYTES} bytes is needed")
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise FetchError(BAD_REQUEST, "the body is not a JSON object")
        return body

    def _error(self, status: int, message: str) -> None:
        self._answer(status, {"error": {"message": message}})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # The store logs one line per fetch; per-request lines (health probes) are noise.
        pass


def downloader(stores: ObjectStores, hub: Hub) -> Download:
    def download(source: ObjectSource | HubSource, folder: Path, limit: int) -> int:
        if isinstance(source, ObjectSource):
            return stores.fetch(source, folder, limit)
        return hub.fetch(source, folder, limit)

    return download


def serve(
    host: str,
    port: int,
    root: Path,
    *,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    gs_endpoint: str = DEFAULT_GS_ENDPOINT,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Serves until SIGTERM or SIGINT; raises ValueError without the operator's token."""
    token = os.environ.pop(TOKEN_ENV, "").strip()  # popped: no child process inherits it
    stores = ObjectStores(StoreConfig(s3_endpoint, s3_region, gs_endpoint))
    store = AdapterStore(root, downloader(stores, Hub.from_env()), limits)
    server = FetcherServer((host, port), store, token)
    store.start()

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)  # the pod is stopping: a clean exit, not a failure

    signal.signal(signal.SIGTERM, stop)
    log.info("adapter fetcher on %s, fetching into %s", server.url, root)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
