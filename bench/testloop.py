"""How long the development loop takes: `make check` (lint, unit tests, the API tier) three times
warm, the median and the slowest; with LLMFLEET_BENCH_MAKE_TEST=1 also `make test` once, warm
(minutes: CI's command). Run from a tree whose virtualenv, tools and images are built."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS = 3


def timed(target: str) -> float:
    start = time.monotonic()
    subprocess.run(["make", target], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def run() -> dict[str, float]:
    checks = [timed("check") for _ in range(RUNS)]
    figures = {"make_check_s": statistics.median(checks), "make_check_s_max": max(checks)}
    if os.environ.get("LLMFLEET_BENCH_MAKE_TEST") == "1":
        figures["make_test_warm_s"] = timed("test")
    return figures
