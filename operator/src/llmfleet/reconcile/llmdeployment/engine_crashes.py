"""Engine containers that keep exiting, with what they said last and, when they ran out of
memory, what to change in the spec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmfleet.reconcile.machinery.exit_words import advice_for, last_words
from llmfleet.render.names import ENGINE_CONTAINER


@dataclass(frozen=True)
class Crash:
    """An engine container that keeps exiting, with what it said last."""

    pod: str
    reason: str
    exit_code: int
    message: str

    def describe(self) -> str:
        said = f": {self.message}" if self.message else ""
        advice = f"; {a}" if (a := advice_for(f"{self.reason} {self.message}")) else ""
        return (
            f"engine pod {self.pod} keeps exiting (last: {self.reason}, exit code "
            f"{self.exit_code}){said}{advice}"
        )


def crashes(pods: tuple[dict[str, Any], ...]) -> list[Crash]:
    """Engine containers that exited with an error and were restarted (CrashLoopBackOff on a
    real kubelet), oldest pod name first."""
    found = []
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") != ENGINE_CONTAINER or not cs.get("restartCount"):
                continue
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if not last or int(last.get("exitCode") or 0) == 0:
                continue
            if "running" in (cs.get("state") or {}) and cs.get("ready"):
                continue  # it came back and serves
            found.append(
                Crash(
                    pod=p["metadata"]["name"],
                    reason=str(last.get("reason") or "Error"),
                    exit_code=int(last.get("exitCode") or 0),
                    message=last_words(str(last.get("message") or "")),
                )
            )
    return sorted(found, key=lambda c: c.pod)
