"""Whether an engine is stalled: requests running and no token counted for a window.

vLLM's /health answers 200 while its engine core is wedged, so the operator judges progress from
the engine's own counters instead: `vllm:num_requests_running` (requests scheduled, prefilling or
decoding), `vllm:prompt_tokens_total` and `vllm:generation_tokens_total`. vLLM counts a prompt's
tokens only once its prefill has finished (vllm/v1/metrics/stats.py, IterationStats), so a long
prompt prefilling alone moves no counter: the derived window outlasts the longest prompt's
prefill. Everything here is pure; `stallwatch.py` reads the pages and acts on the verdicts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

from llmfleet.models.stall import StallDetection
from llmfleet.planner import Plan

RUNNING = "vllm:num_requests_running"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
_FAMILIES = (RUNNING, PROMPT_TOKENS, GENERATION_TOKENS)

# A healthy engine produces a token every inter-token latency; a thousand of them without one is
# no slow step. The floor covers what the prediction does not see: a first CUDA-graph capture,
# a preemption and recompute, a scrape landing on either side of a step.
ITL_MULTIPLE = 1000
PREFILL_MULTIPLE = 3
FLOOR_SECONDS = 30.0
# No prediction (CPU-only serving, a GPU without constants): CPU engines step slowly.
UNPREDICTED_SECONDS = 120.0


def stall_window(setting: StallDetection, plan: Plan) -> float:
    """Seconds without progress before an engine is taken out of service, and again before it is
    restarted: `windowSeconds`, else derived from the plan's prediction."""
    if setting.window_seconds is not None:
        return float(setting.window_seconds)
    p = plan.predicted
    if p is None:
        return UNPREDICTED_SECONDS
    decode = ITL_MULTIPLE * p.itl_millis / 1e3
    # The prediction's TTFT is for the workload's prompt; the longest prompt is maxModelLen.
    prefill = PREFILL_MULTIPLE * p.ttft_millis / 1e3 * plan.max_model_len / p.prompt_tokens
    return max(FLOOR_SECONDS, decode, prefill)


@dataclass(frozen=True)
class Sample:
    """One engine's counters at one moment."""

    running: float
    prompt_tokens: float
    generation_tokens: float


def parse_sample(text: str) -> Sample | None:
    """The three figures from a vLLM /metrics page, summed over its engines and models; None when
    any is missing (not a vLLM engine, or one not serving yet)."""
    # Only these families' lines are parsed: the rest of the page is not ours to validate.
    lines = [line for line in text.splitlines() if _ours(line)]
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for s in family.samples:
                if s.name in _FAMILIES:
                    found[s.name] = found.get(s.name, 0.0) + s.value
    except ValueError:
        return None
    if any(name not in found for name in _FAMILIES):
        return None
    return Sample(found[RUNNING], found[PROMPT_TOKENS], found[GENERATION_TOKENS])


def _ours(line: str) -> bool:
    # Samples only, read untyped: the families' HELP and TYPE lines spell their names
    # differently across client versions (with or without _total).
    name = line.split("{", 1)[0].split(" ", 1)[0]
    return name in _FAMILIES


class Verdict(enum.Enum):
    SERVING = "serving"
    STALLED = "stalled"  # out of service
    RESTART = "restart"  # stalled for a second window


@dataclass(frozen=True)
class Track:
    """What the operator remembers of one engine between samples."""

    last: Sample
    progress_at: float  # when it last made progress (or had nothing to do)
    out_since: float | None = None  # when it was taken out of service


def judge(
    track: Track | None, sample: Sample | None, now: float, window: float, *, busy: bool
) -> tuple[Track | None, Verdict]:
    """The engine's next track and verdict. `sample`: None when its page could not be read;
    `busy`: the operator is loading or unloading a LoRA adapter in it, which may hold its steps.

    Progress is either counter moving (a prompt prefilled, a token generated), a counter going
    back (the engine restarted), no request running, or an adapter call. Without progress for
    `window` seconds the engine is STALLED; still without it `window` seconds after that,
    RESTART. A page not read changes nothing, and never restarts an engine."""
    if sample is None:
        if track is None:
            return None, Verdict.SERVING
        return track, Verdict.SERVING if track.out_since is None else Verdict.STALLED
    if track is None or busy or _progressed(track.last, sample):
        return Track(sample, now), Verdict.SERVING
    track = replace(track, last=sample)
    if now - track.progress_at < window:
        return track, Verdict.SERVING
    if track.out_since is None:
        return replace(track, out_since=now), Verdict.STALLED
    if now - track.out_since < window:
        return track, Verdict.STALLED
    return track, Verdict.RESTART


def _progressed(before: Sample, now: Sample) -> bool:
    return (
        now.running <= 0
        or now.prompt_tokens != before.prompt_tokens
        or now.generation_tokens != before.generation_tokens
    )
