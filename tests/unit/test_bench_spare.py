"""bench/spare_day.py's arithmetic: the day curve and the idle share's integral."""

from __future__ import annotations

import pytest
from bench.spare_day import Sample, day_replicas, idle_share


def test_the_day_is_low_at_night_and_peaks_in_the_afternoon() -> None:
    day = [day_replicas(h, 16) for h in range(24)]
    assert min(day) == day[3] == 2
    assert max(day) == day[15] == 14
    assert day_replicas(3, 2) == 1  # never below one engine


def test_idle_share_weighs_each_sample_by_the_time_until_the_next() -> None:
    samples = [
        Sample(0.0, online=4, spare=0, total=8),  # 4 idle for 1 s
        Sample(1.0, online=4, spare=4, total=8),  # 0 idle for 3 s
        Sample(4.0, online=8, spare=0, total=8),  # closes the replay
    ]
    assert idle_share(samples) == pytest.approx(4 / (8 * 4))
    # More bound than the nodes have (a sample between a preemption's deletion and its
    # replacement) is never negative idle.
    assert Sample(0.0, online=6, spare=4, total=8).idle == 0
    with pytest.raises(ValueError, match="fewer than two samples"):
        idle_share(samples[:1])
