"""bench/burst_profile.py: llm-d's load profile as the replay sends it, the stand-in's settings
from the planner, and the figures (P99 TTFT, failed requests, GPU-seconds)."""

from __future__ import annotations

import importlib
import itertools
import statistics
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bp(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench.burst_profile (the repository root on the path, as `make bench` has it)."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench.burst_profile")


def test_the_published_profile_is_six_segments_over_900_seconds(bp: ModuleType) -> None:
    segments = bp.profile()
    assert [s.rate for s in segments] == [15, 2, 10, 15, 5, 2]
    assert sum(s.seconds for s in segments) == 900


def test_a_shortened_profile_keeps_the_rates(bp: ModuleType) -> None:
    assert [(s.rate, s.seconds) for s in bp.profile(30)][:2] == [(15, 30), (2, 30)]


@pytest.mark.parametrize("segment_s", [0, -5])
def test_a_segment_length_that_is_not_positive_is_refused_naming_the_variable(
    bp: ModuleType, segment_s: float
) -> None:
    with pytest.raises(ValueError, match="BURST_SEGMENT_S"):
        bp.profile(segment_s)


def test_arrivals_follow_each_segments_rate(bp: ModuleType) -> None:
    segments = bp.profile()
    times = bp.arrivals(segments)
    assert times == sorted(times)
    assert times[0] >= 0
    assert times[-1] < 900
    for i, seg in enumerate(segments):
        inside = [t for t in times if i * 150 <= t < (i + 1) * 150]
        expected = seg.rate * seg.seconds
        # A Poisson count is within 4 standard deviations of its mean.
        assert abs(len(inside) - expected) < 4 * expected**0.5, (seg, len(inside))


def test_arrivals_are_open_loop_with_exponential_gaps(bp: ModuleType) -> None:
    times = bp.arrivals([bp.Segment(rate=10.0, seconds=600.0)])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.05)
    # Exponential: the standard deviation equals the mean (a fixed rate would have none).
    assert statistics.stdev(gaps) == pytest.approx(statistics.mean(gaps), rel=0.1)


def test_the_same_seed_replays_the_same_requests(bp: ModuleType) -> None:
    segments = bp.profile(30)
    assert bp.arrivals(segments) == bp.arrivals(segments)
    assert bp.arrivals(segments, seed=1) != bp.arrivals(segments)


def test_the_stand_in_follows_the_planners_32b_on_one_h100(bp: ModuleType) -> None:
    plan = bp.planned()
    model = bp.engine_model(plan)
    assert plan.tensor_parallel_size == 1
    assert plan.gpus_per_replica == 1
    assert model.max_num_seqs == plan.max_concurrent_sequences
    # A stand-in request lasts as long as the plan's 1000 tokens at its ITL.
    scaled = model.output_tokens * model.token_s
    assert scaled == pytest.approx(1000 * plan.predicted.itl_millis / 1000, rel=1e-3)
    # Start: the planner's phases from the container's start, no download (model cache).
    assert dict(model.cold_phases)["compile"] == plan.startup.cold.compile_seconds
    assert dict(model.warm_phases)["compile"] == plan.startup.warm.compile_seconds
    cold = plan.startup.cold
    assert sum(s for _, s in model.cold_phases) == pytest.approx(
        cold.total_seconds - cold.scheduling_seconds - cold.download_seconds
    )
    assert sum(s for _, s in model.warm_phases) < sum(s for _, s in model.cold_phases)


def test_max_replicas_carry_the_busiest_segment(bp: ModuleType) -> None:
    model = bp.engine_model(bp.planned())
    n = bp.replicas_for_peak(model, bp.profile())
    assert n * model.capacity_rps >= 15 > (n - 1) * model.capacity_rps


def test_the_phases_annotation_is_what_the_stand_in_reads(
    bp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "dev"))
    startphases = importlib.import_module("localcluster.standin.startphases")
    phases = (("imports", 38.0), ("compile", 8.3))
    assert startphases.parse(bp.phases_annotation(phases)) == phases


PERCENTILES = {
    "one value": ([5.0], 99, 5.0),
    "p50 of an even count interpolates": ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
    "p99 of 1..101": ([float(i) for i in range(1, 102)], 99, 100.0),
    "order does not matter": ([3.0, 1.0, 2.0], 100, 3.0),
}


@pytest.mark.parametrize(("values", "q", "expected"), PERCENTILES.values(), ids=PERCENTILES.keys())
def test_percentile(bp: ModuleType, values: list[float], q: float, expected: float) -> None:
    assert bp.percentile(values, q) == pytest.approx(expected)


def test_a_request_without_a_token_counts_as_the_timeout_in_the_p99(bp: ModuleType) -> None:
    fast = [bp.Outcome(sent=i, ttft_s=1.0, ok=True) for i in range(98)]
    lost = [bp.Outcome(sent=98 + i, ttft_s=None, ok=False) for i in range(2)]
    assert bp.p99_ttft(fast + lost, timeout_s=300.0) == pytest.approx(300.0)
    assert bp.failed(fast + lost) == 2


def test_a_late_first_token_is_failed_when_the_request_did_not_finish(bp: ModuleType) -> None:
    outcomes = [bp.Outcome(0, 2.0, True), bp.Outcome(1, 250.0, False), bp.Outcome(2, 3.0, True)]
    assert bp.failed(outcomes) == 1


GPU_SECONDS = {
    "constant over the window": ([(0.0, 2)], 0.0, 10.0, 20.0),
    "a step up halfway": ([(0.0, 1), (5.0, 3)], 0.0, 10.0, 5 * 1 + 5 * 3),
    "samples before the window start count from it": ([(-4.0, 2), (2.0, 4)], 0.0, 6.0, 4 + 16),
    "samples after the window end do not count": ([(0.0, 1), (8.0, 9)], 0.0, 6.0, 6.0),
    "nothing held": ([(0.0, 0)], 0.0, 100.0, 0.0),
}


@pytest.mark.parametrize(
    ("timeline", "start", "end", "expected"), GPU_SECONDS.values(), ids=GPU_SECONDS.keys()
)
def test_gpu_seconds_integrate_the_gpus_held_over_the_window(
    bp: ModuleType, timeline: list[tuple[float, int]], start: float, end: float, expected: float
) -> None:
    assert bp.gpu_seconds(timeline, start, end) == pytest.approx(expected)


def test_binned_ttft_groups_requests_by_when_they_were_sent(bp: ModuleType) -> None:
    outcomes = [
        bp.Outcome(1.0, 1.0, True),
        bp.Outcome(9.0, 3.0, True),
        bp.Outcome(25.0, None, False),
    ]
    bins = bp.binned(outcomes, 10.0, 300.0)
    assert [(t, n) for t, _, n in bins] == [(0.0, 0), (20.0, 1)]
    assert bins[0][1] == pytest.approx(bp.percentile([1.0, 3.0], 99))
    assert bins[1][1] == 300.0
