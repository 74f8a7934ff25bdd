"""Pending pods the scheduler cannot place, and the stable part of what it says of them (what
is short), which does not change from one scheduling attempt to the next."""

from __future__ import annotations

from typing import Any

from llmfleet.reconcile.machinery.scheduler_words import (
    GPU_SHORTAGE,
    shortages_in,
    unschedulable_message,
)

__all__ = ["GPU_SHORTAGE", "shortages_in", "unschedulable_pods"]


def unschedulable_pods(pods: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    found = []
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Pending":
            continue
        message = unschedulable_message(p)
        if message is not None:
            found.append((p["metadata"]["name"], message))
    return found
