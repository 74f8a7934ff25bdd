"""The burst replay's inputs and figures, without a cluster (bench/burst.py runs it).

The load: llm-d's bursty autoscaling scenario (llm-d/llm-d-autoscaling PR 1110, results in PR
1118: Qwen/Qwen3-32B on H100s, 15 -> 2 -> 10 -> 15 -> 5 -> 2 requests/s over 900 s, about 1000
prompt and 1000 output tokens; one decode replica at the start, as their runs override it to).
Requests arrive open-loop, Poisson at each segment's rate, from a fixed seed.

The engine: the planner's plan of that model on one H100 80GB (bf16, 4096-token context, a
model cache claim, workload 1000 + 1000 tokens): its max-num-seqs, its predicted ITL for the
stand-in's step, and its predicted start phases for the stand-in's warm-up. The stand-in runs
TOKEN_SCALE times fewer tokens per request at TOKEN_SCALE times the step, so that a request
takes as long as the plan's and the lab's two cores carry the streams.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.startup import StartPhases
from llmfleet.planner.planning import plan
from llmfleet.planner.result import Plan

# llm-d's published profile: (requests/s, seconds) per segment.
PUBLISHED_RATES = (15.0, 2.0, 10.0, 15.0, 5.0, 2.0)
PUBLISHED_SEGMENT_S = 150.0
PROMPT_TOKENS = 1000
OUTPUT_TOKENS = 1000
# What llm-d reported for it (PR 1118, the mean of 3 runs).
THEIR_P99_TTFT_S = 262.441
THEIR_FAILED_REQUESTS = 6110
THEIR_MEAN_POD_START_S = 103.0
# One stand-in step stands for this many of vLLM's: 50 streamed chunks a request, not 1000.
TOKEN_SCALE = 20

# Qwen/Qwen3-32B's config.json (it is not in the planner's catalog; Qwen2.5-32B is, with 40
# query heads where Qwen3-32B has 64).
QWEN3_32B_ARCHITECTURE = {
    "parametersBillions": 32.8,
    "numLayers": 64,
    "numAttentionHeads": 64,
    "numKeyValueHeads": 8,
    "headDim": 128,
    "maxPositionEmbeddings": 40960,
    "vocabSize": 151936,
}
QWEN3_32B_ON_H100 = {
    "model": {
        "name": "Qwen/Qwen3-32B",
        "architecture": QWEN3_32B_ARCHITECTURE,
        "cache": {"claimName": "models"},
    },
    "gpus": {"count": 1, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"},
    "workload": {"promptTokens": PROMPT_TOKENS, "outputTokens": OUTPUT_TOKENS},
    "engine": {"maxModelLen": 4096},
    "autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 32},
}


@dataclass(frozen=True)
class Segment:
    rate: float  # requests/s
    seconds: float


def profile(segment_s: float = PUBLISHED_SEGMENT_S) -> tuple[Segment, ...]:
    """llm-d's six segments, each `segment_s` long (150 s: the published 900 s)."""
    if segment_s <= 0:
        raise ValueError(f"BURST_SEGMENT_S must be a positive number of seconds, not {segment_s}")
    return tuple(Segment(rate, segment_s) for rate in PUBLISHED_RATES)


def arrivals(segments: Sequence[Segment], seed: int = 44) -> list[float]:
    """Send times (seconds from the start) of a Poisson process at each segment's rate."""
    rng = random.Random(seed)
    times: list[float] = []
    start = 0.0
    for seg in segments:
        t = start
        while True:
            t += rng.expovariate(seg.rate)
            if t >= start + seg.seconds:
                break
            times.append(t)
        start += seg.seconds
    return times


@dataclass(frozen=True)
class EngineModel:
    """The stand-in's settings for one configuration, from the plan."""

    max_num_seqs: int
    target_queue_depth: int
    token_s: float  # one stand-in step
    output_tokens: int  # per request, as the stand-in runs it
    cold_phases: tuple[tuple[str, float], ...]  # container start to serving, compile cache off
    warm_phases: tuple[tuple[str, float], ...]  # the same with a warm compile cache
    predicted_ttft_s: float  # the plan's prefill, which the stand-in does not model
    capacity_rps: float  # requests/s one replica finishes at max_num_seqs


# StartPhases' fields in the order a vLLM start goes through them, as the stand-in's phase names.
_PHASE_FIELDS = (
    ("imports", "imports_seconds"),
    ("weight_load", "weight_load_seconds"),
    ("compile", "compile_seconds"),
    ("cuda_graphs", "cuda_graphs_seconds"),
    ("kv_profiling", "kv_profiling_seconds"),
    ("api_ready", "api_ready_seconds"),
)


def container_phases(phases: StartPhases) -> tuple[tuple[str, float], ...]:
    """The phases from the container's start to serving, with the weights on the model cache:
    scheduling and the container's start are the lab's own, and nothing is downloaded."""
    return tuple((name, float(getattr(phases, field))) for name, field in _PHASE_FIELDS)


def phases_annotation(phases: Sequence[tuple[str, float]]) -> str:
    """The stand-in's `lab.llmfleet.test/stand-in-start-phases` value."""
    return ",".join(f"{name}={seconds:g}" for name, seconds in phases)


def planned() -> Plan:
    return plan(LLMDeploymentSpec.model_validate(QWEN3_32B_ON_H100))


def engine_model(p: Plan) -> EngineModel:
    if p.startup is None or p.predicted is None:
        raise ValueError("the plan of Qwen3-32B on an H100 has no start or speed prediction")
    itl_s = p.predicted.itl_millis / 1000
    return EngineModel(
        max_num_seqs=p.max_concurrent_sequences,
        target_queue_depth=p.target_queue_depth or 1,
        token_s=round(itl_s * TOKEN_SCALE, 4),
        output_tokens=OUTPUT_TOKENS // TOKEN_SCALE,
        cold_phases=container_phases(p.startup.cold),
        warm_phases=container_phases(p.startup.warm),
        predicted_ttft_s=p.predicted.ttft_millis / 1000,
        capacity_rps=p.max_concurrent_sequences / (OUTPUT_TOKENS * itl_s),
    )


def replicas_for_peak(model: EngineModel, segments: Sequence[Segment]) -> int:
    """The replicas that finish the busiest segment's requests as fast as they come."""
    return math.ceil(max(s.rate for s in segments) / model.capacity_rps)


# --- Figures ---


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Outcome:
    sent: float  # seconds from the load's start
    ttft_s: float | None  # None: no token came
    ok: bool  # 200, every token, within the client's timeout


def p99_ttft(outcomes: Iterable[Outcome], timeout_s: float) -> float:
    """P99 of the time to first token over every request sent; one that never got a token counts
    as the client's timeout (it waited at least that long)."""
    values = [o.ttft_s if o.ttft_s is not None else timeout_s for o in outcomes]
    return percentile(values, 99)


def failed(outcomes: Iterable[Outcome]) -> int:
    return sum(1 for o in outcomes if not o.ok)


def gpu_seconds(timeline: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """The integral of GPUs held over [start, end]: `timeline` is (time, GPUs held from then on)
    samples in time order, each count holding until the next sample."""
    total = 0.0
    for (t, held), nxt in zip(timeline, [*timeline[1:], (end, 0)], strict=True):
        lo, hi = max(t, start), min(nxt[0], end)
        if hi > lo:
            total += held * (hi - lo)
    return total


def binned(
    outcomes: Iterable[Outcome], width_s: float, timeout_s: float
) -> list[tuple[float, float, int]]:
    """(bin start, P99 TTFT, failed requests) of the requests sent in each `width_s` bin, in
    time order; bins where nothing was sent are left out."""
    bins: dict[int, list[Outcome]] = {}
    for o in outcomes:
        bins.setdefault(int(o.sent // width_s), []).append(o)
    return [
        (i * width_s, p99_ttft(group, timeout_s), failed(group))
        for i, group in sorted(bins.items())
    ]
