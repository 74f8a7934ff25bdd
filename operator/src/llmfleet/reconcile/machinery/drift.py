"""Decides whether a rendered object needs applying, so an idle resync makes no API writes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

APPLIED_HASH = "llmfleet.dev/applied-hash"


def content_hash(obj: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """The object plus an annotation naming its content: a changed render changes the hash, which
    catches fields we stopped rendering (a subset check alone cannot see those)."""
    h = content_hash(obj)
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), APPLIED_HASH: h}
    return {**obj, "metadata": meta}


def is_subset(desired: Any, live: Any) -> bool:
    """Every field we render has the same value in the live object (which has defaults added)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            k in live and is_subset(v, live[k]) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(is_subset(d, x) for d, x in zip(desired, live, strict=True))
        )
    return bool(desired == live)


def needs_apply(desired_with_hash: dict[str, Any], live: dict[str, Any] | None) -> bool:
    if live is None:
        return True
    return not is_subset(desired_with_hash, live)
