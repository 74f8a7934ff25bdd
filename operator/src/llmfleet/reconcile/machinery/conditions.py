"""Status conditions, in the standard Kubernetes shape, as every kind's status carries them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from llmfleet.models.status import Condition, ConditionStatus

TRUE: ConditionStatus = "True"
FALSE: ConditionStatus = "False"
UNKNOWN: ConditionStatus = "Unknown"
# The one condition type every kind writes: the shared reconcile reports refusals in it.
DEGRADED = "Degraded"


def now() -> datetime:
    # Whole seconds: Kubernetes timestamps have no fraction, and a status must compare equal
    # to itself after a round trip through the API server.
    return datetime.now(UTC).replace(microsecond=0)


def condition(
    ctype: str, status: ConditionStatus, reason: str, message: str, generation: int
) -> Condition:
    """A condition as computed now; keep_transition_times stamps it."""
    return Condition(
        type=ctype,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def keep_transition_times(
    new: Iterable[Condition], old: Iterable[Condition]
) -> tuple[Condition, ...]:
    """`new`, sorted by type, each stamped with lastTransitionTime, which changes only when a
    condition's status does."""
    before = {c.type: c for c in old}
    stamp = now()
    out = []
    for c in new:
        prev = before.get(c.type)
        same = prev is not None and prev.status == c.status and prev.last_transition_time
        at = prev.last_transition_time if same and prev else stamp
        out.append(c.model_copy(update={"last_transition_time": at}))
    return tuple(sorted(out, key=lambda c: c.type))


def find(conditions: Iterable[Condition], ctype: str) -> Condition | None:
    return next((c for c in conditions if c.type == ctype), None)
