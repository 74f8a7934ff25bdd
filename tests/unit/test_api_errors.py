"""What a user reads in the retry Event when the API server refuses a child the operator applies:
the server's own message, not just a status code."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from llmfleet.reconcile.machinery.errors import api_error


def refused(status: int, reason: str, body: str | None) -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = body
    return e


QUOTA = (
    'horizontalpodautoscalers.autoscaling "q" is forbidden: exceeded quota: no-autoscalers, '
    "requested: count/horizontalpodautoscalers.autoscaling=1, used: "
    "count/horizontalpodautoscalers.autoscaling=0, limited: "
    "count/horizontalpodautoscalers.autoscaling=0"
)
CASES = {
    "a quota refusal carries the quota's message": (
        refused(403, "Forbidden", json.dumps({"kind": "Status", "message": QUOTA})),
        f"API 403 Forbidden: {QUOTA}",
    ),
    "a body that is not JSON is quoted, shortened": (
        refused(502, "Bad Gateway", "<html>" + "x" * 400),
        "API 502 Bad Gateway: <html>" + "x" * 294,
    ),
    "no body gives the status alone": (
        refused(500, "Internal Server Error", None),
        "API 500 Internal Server Error",
    ),
}


@pytest.mark.parametrize(("error", "expected"), CASES.values(), ids=CASES.keys())
def test_the_retry_message_says_what_the_api_server_said(
    error: ApiException, expected: str
) -> None:
    assert api_error(error) == expected
