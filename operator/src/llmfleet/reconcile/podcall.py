"""One HTTP call from the operator to a pod's own address (an engine's LoRA API, the adapter
fetcher beside it): JSON in, status and at most 1 MiB of text out, never through a proxy."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from llmfleet.hubclient import TokenStaysHome

# Pod IPs directly, never through a proxy; a key goes to the pod's own address only.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), TokenStaysHome)
MAX_ANSWER_BYTES = 1 << 20


def call(
    url: str,
    body: Mapping[str, Any] | None,
    timeout: float,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """GET without a body, else POST it as JSON; the status and the answer's text. Raises
    OSError when the pod does not answer."""
    data = None if body is None else json.dumps(body).encode()
    sent = dict(headers or {})
    if data:
        sent["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=sent)
    try:
        with _OPENER.open(request, timeout=timeout) as r:
            return int(r.status), r.read(MAX_ANSWER_BYTES).decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read(MAX_ANSWER_BYTES).decode("utf-8", errors="replace")
