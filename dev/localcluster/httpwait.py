"""Plain HTTP(S) GETs of the local cluster's endpoints (health, readiness, the API), and waiting
for one to answer while the process behind it still runs."""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def get(url: str, context: ssl.SSLContext | None = None, accept: str | None = None) -> bytes:
    """The body of a 2xx answer; OSError (urllib.error.URLError, HTTPError) otherwise."""
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=5, context=context) as resp:
        body: bytes = resp.read()
        return body


def answers(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        get(url, context)
    except (OSError, urllib.error.URLError):
        return False
    return True


def wait(
    url: str,
    what: str,
    check: Callable[[], None],
    context: ssl.SSLContext | None = None,
    timeout: float = 90,
) -> None:
    """Until a GET of `url` answers 2xx; `check()` first each time (it raises once the process
    that should answer has exited); TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        check()
        try:
            get(url, context)
            return
        except (OSError, urllib.error.URLError) as e:
            last = e
            time.sleep(0.2)
    raise TimeoutError(f"{what} not ready at {url} after {timeout}s: {last}")
