"""The run's time per worker and per module, at the end of the terminal summary: which worker
ended last, with what, is what tests/workers.py's SLOWEST_FIRST is ordered from (pytest's
`--durations` lists tests, not modules or workers). Setup and teardown count with the module."""

from __future__ import annotations

from collections import defaultdict

import pytest

_seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # xdist: the worker that ran it, on the controller
    worker = node.gateway.id if node is not None else "main"
    _seconds[worker][report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    terminalreporter.section("time per worker (modules over 30 s)")
    for worker, modules in sorted(_seconds.items()):
        terminalreporter.write_line(f"{worker}: {sum(modules.values()):.0f}s")
        for module, seconds in sorted(modules.items(), key=lambda kv: -kv[1]):
            if seconds >= 30:
                terminalreporter.write_line(f"  {seconds:7.1f}s  {module}")
