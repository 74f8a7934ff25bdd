"""Waiting for the cluster to come around: the one polling helper the local cluster, the demo, the
tests and the benchmarks share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.5,
    what: str = "condition",
) -> Any:
    """`predicate()`'s first truthy value, asked every `interval` seconds; AssertionError naming
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout:.0f}s")
        time.sleep(interval)
