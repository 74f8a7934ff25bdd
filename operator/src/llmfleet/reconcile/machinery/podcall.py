"""Every HTTP call the operator makes to a pod (an engine's /metrics and LoRA API, the adapter
fetcher beside it, a batch runner's /metrics), under one policy:

* the address is an IP literal, as the pod's status gives it: a name would be resolved by the
  operator's DNS and could lead anywhere (outside the cluster, the API server), and a pod's IP is
  what the kubelet wrote, not what the pod's owner chose;
* no proxy, ever: http.client has none, so an HTTP(S)_PROXY in the operator's environment (meant
  for the Hub, the outside world) neither sees the calls nor the keys they carry;
* no redirect is followed: it would lead away from the address checked; a 3xx is an answer;
* a timeout on the connection and on each read, and a cap on the answer's size;
* one error, PodCallError (an OSError), for a pod that cannot be asked or does not answer well;
* a call may be ended from another thread (`Abort`: the operator stopping).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 1 << 20


class PodCallError(OSError):
    """The pod was not asked (no IP address), did not answer, or answered more than the cap."""


class Abort:
    """Ends, from another thread, the calls given it: those in flight raise PodCallError at once
    (their socket is shut down), those begun later are not sent. Python cannot end a thread
    blocked on a read; shutting its socket can. A call still connecting ends at its timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._aborted = False
        self._sockets: set[socket.socket] = set()

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):  # closed meanwhile: that call has ended anyway
                sock.shutdown(socket.SHUT_RDWR)

    def enter(self, sock: socket.socket) -> None:
        """A call's connected socket (pair with `leave`); PodCallError once aborted."""
        with self._lock:
            if self._aborted:
                raise PodCallError("not sent: the operator is stopping")
            self._sockets.add(sock)

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)


def pod_url(pod_ip: str, port: int, path: str = "") -> str | None:
    """http://IP:port`path` of a pod IP, or None when `pod_ip` is no IP address."""
    try:
        address = ipaddress.ip_address(pod_ip)
    except ValueError:
        return None
    host = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{host}:{port}{path}"


def call(
    url: str,
    body: Mapping[str, Any] | None,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
    *,
    abort: Abort | None = None,
) -> tuple[int, str]:
    """GET without a body, else POST it as JSON; the status (any, 3xx included) and the
    answer's text. Raises PodCallError when `url` is no http://IP:port/ address, the pod does not
    answer within `timeout`, its answer is larger than `max_bytes`, or `abort` ended it."""
    host, port, target = _address(url)
    data = None if body is None else json.dumps(body).encode()
    sent = dict(headers or {})
    if data is not None:
        sent["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    sock: socket.socket | None = None
    try:
        if abort is not None:
            connection.connect()
            sock = connection.sock
            abort.enter(sock)
        connection.request("GET" if data is None else "POST", target, data, sent)
        answer = connection.getresponse()
        text = answer.read(max_bytes + 1)
    except (OSError, http.client.HTTPException) as e:
        raise PodCallError(f"{url} did not answer: {e or type(e).__name__}") from None
    finally:
        if abort is not None and sock is not None:
            abort.leave(sock)
        connection.close()
    if len(text) > max_bytes:
        raise PodCallError(f"{url} answered more than {max_bytes} bytes: not what was asked for")
    return answer.status, text.decode("utf-8", errors="replace")


def read_page(pod_ip: str, port: int, path: str, timeout: float, max_bytes: int) -> str | None:
    """The text a pod serves at `path` (a /metrics page), or None when it has no IP address,
    does not answer 200 or answers more than `max_bytes`: a page not read is asked again later."""
    url = pod_url(pod_ip, port, path)
    if url is None:
        return None
    try:
        status, text = call(url, None, timeout, max_bytes=max_bytes)
    except PodCallError as e:
        log.debug("cannot read %s: %s", url, e)
        return None
    return text if status == 200 else None


def _address(url: str) -> tuple[str, int, str]:
    """(IP, port, path?query) of an http://IP:port/ address; PodCallError for anything else."""
    parts = urlsplit(url)
    try:
        ipaddress.ip_address(parts.hostname or "")
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or port is None or parts.username or parts.password:
        raise PodCallError(
            f"{url!r} is not a pod's address: the operator calls http://IP:port/ of a pod's "
            "status only, never a name"
        )
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return str(parts.hostname), port, target
