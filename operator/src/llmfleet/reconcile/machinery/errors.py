"""What the API server said when it refused a write, in the words users read in Events and logs."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


class UnavailableError(Exception):
    """Something the spec needs is out of reach for now (the Hub's config.json): status says so
    (Planned=False, `reason`) as it says a refusal, and the reconcile is retried with backoff."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def api_error(e: ApiException) -> str:
    """What the API server said, for the retry's Event and log: its status and message (e.g. a
    quota or an admission webhook that refused a child)."""
    message = ""
    try:
        message = str(json.loads(e.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        message = str(e.body or "")[:300]
    return f"API {e.status} {e.reason}" + (f": {message}" if message else "")


def is_refusal(e: Exception) -> bool:
    """The API server refused the request as it is (RBAC, a quota, admission, validation): a
    person must act. Conflicts, throttling and server errors pass by themselves."""
    return (
        isinstance(e, ApiException)
        and e.status is not None
        and 400 <= e.status < 500
        and (e.status not in (409, 429))
    )


def retry_after(e: Exception) -> float | None:
    """The Retry-After seconds a throttled (429) or unavailable (503) API server asked for."""
    if not isinstance(e, ApiException) or not e.headers:
        return None
    try:
        return float(e.headers.get("Retry-After") or "")
    except ValueError:
        return None


def describe_error(e: Exception) -> str:
    """An error in a line users can read in status: the API server's words, or the exception."""
    if isinstance(e, ApiException):
        return api_error(e)
    return f"{type(e).__name__}: {e}"[:300]
