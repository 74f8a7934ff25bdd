"""The operator's metrics of its own work, for every kind it reconciles (label `kind`:
LLMDeployment or LLMBatchJob): reconciles by result, their duration, the errors by resource and
reason, and every write it makes to the Kubernetes API.

Counted where the work happens: `reconcile.machinery.base.Reconciler` counts reconciles and errors,
and each writer (`Applier`, `Reconciler.write_status`, `EventRecorder`, the Secret and pod-gate
writers) counts its own writes, so a write is counted once whoever asked for it.
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Histogram

RECONCILES = Counter("llmfleet_reconcile", "Reconciles by kind and result", ["kind", "result"])
RECONCILE_DURATION = Histogram(
    "llmfleet_reconcile_duration_seconds",
    "Time one reconcile takes, by kind",
    ["kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter(
    "llmfleet_reconcile_errors",
    "Reconciles that failed with an error (not an invalid spec), by resource and reason",
    ["kind", "namespace", "name", "reason"],
)
API_WRITES = Counter(
    "llmfleet_api_writes",
    "Writes to the Kubernetes API, by verb and the kind of object written (a status write is "
    "kind=<Kind>/status)",
    ["verb", "kind"],
)
# What a reconcile can end as; `error` also counts in RECONCILE_ERRORS.
RESULTS = ("changed", "unchanged", "invalid", "error")

_lock = threading.Lock()
_error_reasons: dict[tuple[str, str, str], set[str]] = {}


def count_reconcile(kind: str, result: str, seconds: float) -> None:
    """One reconcile of a `kind` resource ended with `result` (one of RESULTS)."""
    if result not in RESULTS:
        raise ValueError(f"result: {result!r} is none of {', '.join(RESULTS)}")
    RECONCILES.labels(kind, result).inc()
    RECONCILE_DURATION.labels(kind).observe(seconds)


def count_write(verb: str, kind: str) -> None:
    """One write to the API server that it accepted: create, update, patch or delete."""
    API_WRITES.labels(verb, kind).inc()


def error_reason(error: BaseException) -> str:
    """A short, bounded reason for a failed reconcile: the Kubernetes API status for API errors
    (duck-typed on `.status`, as kubernetes' ApiException and the dynamic client's errors carry
    it), the exception's class name otherwise."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status > 0:
        return _API_REASONS.get(status, "ServerError" if status >= 500 else f"HTTP{status}")
    if isinstance(error, TimeoutError):
        return "Timeout"
    if isinstance(error, OSError):
        return "Unreachable"
    return type(error).__name__


_API_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Gone",
    422: "Invalid",
    429: "TooManyRequests",
    500: "ServerError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def record_reconcile_error(kind: str, namespace: str, name: str, error: BaseException) -> str:
    """Count a failed reconcile in `llmfleet_reconcile_errors_total` and return its reason.

    An invalid spec is not an error here (it is `llmfleet_reconcile_total{result="invalid"}`
    and the resource's refusal in status)."""
    reason = error_reason(error)
    with _lock:
        RECONCILE_ERRORS.labels(kind, namespace, name, reason).inc()
        _error_reasons.setdefault((kind, namespace, name), set()).add(reason)
    return reason


def forget(kind: str, namespace: str, name: str) -> None:
    """Drop the error series of a resource that is gone."""
    with _lock:
        for reason in _error_reasons.pop((kind, namespace, name), set()):
            RECONCILE_ERRORS.remove(kind, namespace, name, reason)
