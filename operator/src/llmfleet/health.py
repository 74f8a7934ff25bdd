"""/healthz of the operator process: the chart's startup, liveness and readiness probes.

kopf's own liveness endpoint only says kopf's event loop answers, and kopf runs only on the
leader. So the process serves its own: healthy while the leader election campaigns (and, when
leading, renews), every loop of the manager that should run still runs (the watches; on the
leader also the queues, the resync and the batch poll), and, on the leader, kopf's endpoint
answers. A standby replica is healthy and ready: during a rolling upgrade the new pod must become
Ready before the old one, the leader, is stopped and hands the Lease over.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# How long kopf may take to serve its endpoint after this replica starts leading.
KOPF_START_GRACE = 60.0

Check = Callable[[], tuple[bool, str]]


def kopf_check(url: str, since: Callable[[], float | None]) -> Check:
    """kopf's liveness endpoint answers; `since` says when kopf was started (None: not yet)."""

    def check() -> tuple[bool, str]:
        started = since()
        if started is None:
            return True, "kopf not started"
        try:
            # Not a pod call (reconcile/machinery/podcall.py): kopf's endpoint in this very process.
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return True, "kopf answers"
                why = f"HTTP {r.status}"
        except OSError as e:
            why = str(e)
        if time.monotonic() - started < KOPF_START_GRACE:
            return True, "kopf starting"
        return False, f"kopf does not answer ({why})"

    return check


class HealthServer:
    """Serves GET `path` on host:port from `url`: 200 with one line per check when all pass,
    500 naming the failing ones otherwise."""

    def __init__(self, url: str, checks: list[Check]) -> None:
        parts = urlsplit(url)
        self.path = parts.path or "/healthz"
        self._checks = checks
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != server.path:
                    self.send_error(404)
                    return
                ok, text = server.report()
                body = text.encode()
                self.send_response(200 if ok else 500)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # a probe every few seconds is not worth a log line

        address = (parts.hostname or "0.0.0.0", 8080 if parts.port is None else parts.port)
        self._httpd = ThreadingHTTPServer(address, Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="llmfleet-healthz", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def report(self) -> tuple[bool, str]:
        results = []
        for check in self._checks:
            try:
                results.append(check())
            except Exception as e:  # a broken check is a failed one, not a crashed server
                results.append((False, f"check failed: {e}"))
        ok = all(passed for passed, _ in results)
        if not ok:
            log.warning("unhealthy: %s", "; ".join(t for passed, t in results if not passed))
        return ok, "".join(f"{'ok' if p else 'FAIL'}: {t}\n" for p, t in results)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
