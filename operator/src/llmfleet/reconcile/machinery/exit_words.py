"""What a container said as it exited (its termination message, a log's tail under
`terminationMessagePolicy: FallbackToLogsOnError`), read the same on every restart, and what to
change in the spec when it ran out of memory. Both kinds' crash reports read it."""

from __future__ import annotations

import re

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
# A log line's prefix (level, date, time, source), which differs on every crash: vLLM's
# `INFO 11-27 10:00:00 [file.py:1]`, and an ISO date and time first (Python logging's default
# `2026-11-27 10:00:00,123`, RFC 3339).
_LOG_PREFIX = re.compile(
    r"^(\(\w+ pid=\d+\)\s*)?"
    r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}([.,]\d+)?(Z|[+-]\d{2}:?\d{2})?\s*)?"
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL)?\s*"
    r"(\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*)?(\[[^\]]*\]\s*)?"
)


def advice_for(said: str) -> str:
    """What to change in the spec when what an engine said on exit is running out of memory."""
    return OUT_OF_MEMORY_ADVICE if _OUT_OF_MEMORY.search(said) else ""


def last_words(message: str) -> str:
    """The last line of a termination message (a log's tail), without its timestamp, so that
    the same failure reads the same on every restart."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return _LOG_PREFIX.sub("", lines[-1])[:300] if lines else ""
