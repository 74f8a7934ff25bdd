"""Reading the live objects the reconcile observes (dicts), where any field may be missing."""

from __future__ import annotations

from typing import Any


def int_field(obj: dict[str, Any] | None, *path: str) -> int:
    """The integer at `path`, 0 where any step of it is missing."""
    cur: Any = obj
    for key in path:
        cur = (cur or {}).get(key)
    return int(cur or 0)


def condition_status(obj: dict[str, Any] | None, kind: str) -> str | None:
    """The status of the condition `kind` in obj.status.conditions, None without one."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None
