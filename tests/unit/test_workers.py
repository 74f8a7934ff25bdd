"""make test's pytest-xdist workers (tests/workers.py): a lab each, the slowest modules
first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import workers


@pytest.mark.parametrize(
    ("worker", "base", "state", "want_index", "want_state"),
    [
        # Not the lab of `make cluster-up` / `make demo` (index 0, .cluster): make test never
        # sees what the demo left, and the demo never lists what the tests made.
        ("gw0", None, None, "1", f"{workers.REPO / '.cluster'}-gw0"),
        ("gw1", None, None, "2", f"{workers.REPO / '.cluster'}-gw1"),
        # Beside a lab of another index (a second checkout's), the workers move with it.
        ("gw1", "2", "/tmp/lab", "4", "/tmp/lab-gw1"),
        ("gw3", "2", None, "6", f"{workers.REPO / '.cluster'}-gw3"),
    ],
)
def test_each_worker_gets_a_lab_of_its_own_apart_from_the_demos(
    monkeypatch: pytest.MonkeyPatch,
    worker: str,
    base: str | None,
    state: str | None,
    want_index: str | None,
    want_state: str | None,
) -> None:
    for name, value in (("LLMFLEET_CLUSTER_INDEX", base), ("LLMFLEET_CLUSTER_DIR", state)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    workers._own_lab(worker)
    assert os.environ.get("LLMFLEET_CLUSTER_INDEX") == (want_index or base)
    assert os.environ.get("LLMFLEET_CLUSTER_DIR") == (want_state or state)


def test_the_slowest_e2e_modules_go_first_and_the_short_tiers_fill_in_at_the_end() -> None:
    collected = [
        "tests/api/test_chart.py",
        "tests/e2e/test_cluster.py",
        "tests/e2e/test_demo.py",
        "tests/e2e/test_autoscaling.py",
        "tests/lab/test_engine_standin.py",
        "tests/unit/test_layout.py",
        "tests/e2e/test_keda.py",
    ]
    assert workers.ordered(collected) == [
        "tests/e2e/test_autoscaling.py",
        "tests/e2e/test_demo.py",
        "tests/e2e/test_keda.py",
        "tests/e2e/test_cluster.py",  # not among the slowest: after them, in collection order
        "tests/api/test_chart.py",
        "tests/lab/test_engine_standin.py",
        "tests/unit/test_layout.py",
    ]


def test_after_one_slow_module_per_worker_each_e2e_module_is_followed_by_a_unit_spacer() -> None:
    """So that xdist, which sends a worker the next module of the queue when it has two tests or
    fewer left, sends a worker running a one-test e2e module a short unit module, not the next
    slow one: the next slow module goes to whichever worker frees first."""
    collected = [
        "tests/unit/test_a.py",
        "tests/e2e/test_scale_to_zero.py",
        "tests/unit/test_b.py",
        "tests/e2e/test_spare_batch.py",
        "tests/e2e/test_upgrade.py",
        "tests/unit/test_c.py",
        "tests/api/test_chart.py",
        "tests/e2e/test_demo.py",
        "tests/lab/test_d.py",
        "tests/unit/test_one_test.py",
    ]
    spacers = {"tests/unit/test_a.py", "tests/unit/test_b.py", "tests/unit/test_c.py"}
    assert workers.ordered(collected, spacers, workers=2) == [
        "tests/e2e/test_scale_to_zero.py",  # one each to start with
        "tests/e2e/test_upgrade.py",
        "tests/unit/test_a.py",  # each worker's spacer
        "tests/unit/test_b.py",
        "tests/e2e/test_spare_batch.py",
        "tests/unit/test_c.py",
        "tests/e2e/test_demo.py",  # the spacers ran out
        "tests/api/test_chart.py",
        "tests/lab/test_d.py",
        "tests/unit/test_one_test.py",  # not a spacer (too few tests): in collection order
    ]


def test_every_module_named_as_slow_exists() -> None:
    """A renamed module would silently lose its place at the front."""
    e2e = Path(workers.REPO / "tests" / "e2e")
    assert [m for m in workers.SLOWEST_FIRST if not (e2e / f"{m}.py").exists()] == []
