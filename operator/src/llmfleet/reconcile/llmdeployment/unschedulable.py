"""Pending pods the scheduler cannot place, with what it says of them (read by
machinery/scheduler_words, which both kinds share)."""

from __future__ import annotations

from typing import Any

from llmfleet.reconcile.machinery.scheduler_words import unschedulable_message


def unschedulable_pods(pods: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    found = []
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Pending":
            continue
        message = unschedulable_message(p)
        if message is not None:
            found.append((p["metadata"]["name"], message))
    return found
