"""bench/spare_day.py's arithmetic: the day curve and the idle share's integral."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def spare_day(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench.spare_day (the repository root on the path, as `make bench` has it)."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench.spare_day")


def test_the_day_is_low_at_night_and_peaks_in_the_afternoon(spare_day: ModuleType) -> None:
    day_replicas = spare_day.day_replicas
    day = [day_replicas(h, 16) for h in range(24)]
    assert min(day) == day[3] == 2
    assert max(day) == day[15] == 14
    assert day_replicas(3, 2) == 1  # never below one engine


def test_idle_share_weighs_each_sample_by_the_time_until_the_next(spare_day: ModuleType) -> None:
    sample, idle_share = spare_day.Sample, spare_day.idle_share
    samples = [
        sample(0.0, online=4, spare=0, total=8),  # 4 idle for 1 s
        sample(1.0, online=4, spare=4, total=8),  # 0 idle for 3 s
        sample(4.0, online=8, spare=0, total=8),  # closes the replay
    ]
    assert idle_share(samples) == pytest.approx(4 / (8 * 4))
    # More bound than the nodes have (a sample between a preemption's deletion and its
    # replacement) is never negative idle.
    assert sample(0.0, online=6, spare=4, total=8).idle == 0
    with pytest.raises(ValueError, match="fewer than two samples"):
        idle_share(samples[:1])
