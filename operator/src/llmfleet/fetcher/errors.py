"""Why a fetch failed, as the fetcher answers it: an HTTP status the operator maps to the
adapter's status, and a message for the user that names the source and says what to change."""

from __future__ import annotations

# The statuses the fetcher answers with, one per thing the user (or the cluster's admin) does
# about it; the operator maps each to a reason in the LLMDeployment's status.
BAD_REQUEST = 400  # malformed source or revision: fix the spec
FORBIDDEN = 403  # credentials refused or missing: fix the Secret (or the Hub token)
NOT_FOUND = 404  # no bucket, nothing under the prefix, no such repo or revision: fix the spec
TOO_LARGE = 413  # more than --max-bytes: a smaller adapter or a larger limit
NOT_AN_ADAPTER = 422  # no adapter_config.json at the top: point at the adapter's own folder
BAD_GATEWAY = 502  # the store did not answer, or answered what the fetcher cannot use: retry
NO_SPACE = 507  # the pod's adapter volume is full: prune, or a larger volume


class FetchError(Exception):
    """A fetch that failed for a reason the answer's status says."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message: str) -> FetchError:
    return FetchError(BAD_REQUEST, message)


def not_an_adapter(source: str) -> FetchError:
    return FetchError(
        NOT_AN_ADAPTER,
        f"{source} has no adapter_config.json at its top: point the source at the folder that "
        "holds the adapter's adapter_config.json and weights (a PEFT save_pretrained folder)",
    )


def too_large(source: str, limit: int) -> FetchError:
    return FetchError(
        TOO_LARGE,
        f"{source} is larger than the fetcher's limit of {limit} bytes (--max-bytes): is it "
        "an adapter, or a whole model? Raise the limit if the adapter really is this large",
    )
