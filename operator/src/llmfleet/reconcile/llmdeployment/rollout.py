"""A change of layout: the previous layout's engines keep serving until the new one holds its
minimum replicas, and only then are they pruned."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmfleet.reconcile.machinery.apply import ref
from llmfleet.render.router import COMPONENT_ROUTER

from .standbyloop import is_standby


def is_router(obj: dict[str, Any]) -> bool:
    """The router's Deployment and pods share the children's labels but are no engine."""
    labels = obj["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/component") == COMPONENT_ROUTER


def previous_engines(
    candidates: Iterable[dict[str, Any]], engine: dict[str, Any]
) -> tuple[dict[str, Any], ...]:
    """The live engine objects (Deployments, LeaderWorkerSets) of earlier layouts: every
    candidate but the rendered `engine`, the router's and the standby engines'. Judged by label,
    not by what was rendered, so a router or standby turned off is pruned at once, never held."""
    current = ref(engine)
    return tuple(
        d for d in candidates if ref(d) != current and not is_router(d) and not is_standby(d)
    )


def held(
    old_engines: Iterable[dict[str, Any]], engine: dict[str, Any] | None, min_replicas: int
) -> list[str]:
    """The refs of `old_engines` to keep: all of them until the live `engine` has at least
    max(1, min_replicas) ready replicas, then none."""
    ready = int(((engine or {}).get("status") or {}).get("readyReplicas") or 0)
    return [] if ready >= max(1, min_replicas) else [ref(d) for d in old_engines]
