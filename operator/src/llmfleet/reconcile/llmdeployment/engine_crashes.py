"""Engine containers that keep exiting, with what they said last and, when they ran out of
memory, what to change in the spec."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmfleet.render.names import ENGINE_CONTAINER

# Said of an engine that died for want of memory: the exit reason, or vLLM's and PyTorch's words.
_OUT_OF_MEMORY = re.compile(
    r"OOMKilled|CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks|"
    r"larger than the available KV cache memory",
    re.IGNORECASE,
)
OUT_OF_MEMORY_ADVICE = (
    "the engine ran out of memory: quantize to fp8 (spec.model.quantization), give it more GPUs "
    "(spec.gpus.count) or a shorter context (spec.engine.maxModelLen)"
)
# A log line's prefix (level, date, time, source), which differs on every crash.
_LOG_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\)\s*)?(DEBUG|INFO|WARNING|ERROR|CRITICAL)?\s*"
    r"(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*)?(\[[^\]]*\]\s*)?"
)


@dataclass(frozen=True)
class Crash:
    """An engine container that keeps exiting, with what it said last."""

    pod: str
    reason: str
    exit_code: int
    message: str

    def describe(self) -> str:
        said = f": {self.message}" if self.message else ""
        advice = (
            f"; {OUT_OF_MEMORY_ADVICE}"
            if _OUT_OF_MEMORY.search(f"{self.reason} {self.message}")
            else ""
        )
        return (
            f"engine pod {self.pod} keeps exiting (last: {self.reason}, exit code "
            f"{self.exit_code}){said}{advice}"
        )


def _last_words(message: str) -> str:
    """The last line of a termination message (a log's tail), without its timestamp, so that
    the same failure reads the same on every restart."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return _LOG_PREFIX.sub("", lines[-1])[:300] if lines else ""


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
                    message=_last_words(str(last.get("message") or "")),
                )
            )
    return sorted(found, key=lambda c: c.pod)
