"""The one error the planner raises."""

from __future__ import annotations


class PlanError(ValueError):
    """The spec cannot be planned. `field` is the manifest path to change, e.g. spec.gpus.count."""

    def __init__(self, field: str, message: str, reason: str = "PlanningFailed") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.reason = reason  # the Planned=False condition's reason
