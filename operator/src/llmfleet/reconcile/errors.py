"""What the API server said when it refused a write, in the words users read in Events and logs."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


def api_error(e: ApiException) -> str:
    """What the API server said, for the retry's Event and log: its status and message (e.g. a
    quota or an admission webhook that refused a child)."""
    message = ""
    try:
        message = str(json.loads(e.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        message = str(e.body or "")[:300]
    return f"API {e.status} {e.reason}" + (f": {message}" if message else "")
