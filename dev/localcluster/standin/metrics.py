"""The stand-in's /metrics: the families of families.py with the stand-in scheduler's values, in
prometheus_client's text format (0.0.4), as vLLM writes them."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .config import EngineConfig, cache_config_labels
from .families import (
    ADMISSION_REASONS,
    CACHED_SOURCES,
    COUNTERS,
    FINISHED_REASONS,
    GAUGES,
    HISTOGRAMS,
    PROMPT_SOURCES,
    SLEEP_STATES,
    buckets,
)
from .scheduler import Scheduler, Seq

Series = list[tuple[dict[str, str], float]]


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += value
        self.count += 1


class Stats:
    """What the engine counted since it started."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = dict.fromkeys(FINISHED_REASONS, 0)
        self.hist = {
            name: Histogram(buckets(family, cfg.max_model_len))
            for name, (_, family) in HISTOGRAMS.items()
        }

    def observe(self, name: str, value: float) -> None:
        self.hist[f"vllm:{name}"].observe(value)

    def request(self, n: int, max_tokens: int) -> None:
        self.observe("request_params_n", n)
        self.observe("request_params_max_tokens", max_tokens)

    def step(self, tokens: int, admitted: Sequence[Seq]) -> None:
        self.observe("iteration_tokens_total", tokens)
        self.prompt_tokens += sum(s.prompt_tokens for s in admitted if s.preemptions == 0)

    def token(self, gap: float | None) -> None:
        self.generation_tokens += 1
        if gap is not None:
            self.observe("inter_token_latency_seconds", gap)

    def first_token(self, seq: Seq, now: float) -> None:
        self.observe("time_to_first_token_seconds", now - seq.arrival)

    def finish(self, seq: Seq, now: float) -> None:
        self.finished[seq.finish_reason or "error"] += 1
        if seq.finish_reason != "length":
            return
        scheduled = seq.scheduled if seq.scheduled is not None else now
        first = seq.first_token if seq.first_token is not None else now
        for name, value in (
            ("request_prompt_tokens", seq.prompt_tokens),
            ("request_prefill_kv_computed_tokens", seq.prompt_tokens),
            ("request_generation_tokens", seq.generated),
            ("request_max_num_generation_tokens", seq.max_tokens),
            ("e2e_request_latency_seconds", now - seq.arrival),
            ("request_queue_time_seconds", scheduled - seq.arrival),
            ("request_inference_time_seconds", now - scheduled),
            ("request_prefill_time_seconds", first - scheduled),
            ("request_decode_time_seconds", now - first),
            ("request_num_preemptions", seq.preemptions),
        ):
            self.observe(name, value)
        if seq.generated > 1:
            self.observe(
                "request_time_per_output_token_seconds", (now - first) / (seq.generated - 1)
            )


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


class _Page:
    def __init__(self, created: float) -> None:
        self.lines: list[str] = []
        self.created = created

    def _family(self, name: str, kind: str, help_text: str, samples: list[str]) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]

    def gauge(self, name: str, series: Series, help_text: str = "") -> None:
        samples = [f"{name}{_labels(labels)} {_num(v)}" for labels, v in series]
        self._family(name, "gauge", help_text or GAUGES[name], samples)

    def counter(self, name: str, series: Series) -> None:
        samples = [f"{name}_total{_labels(labels)} {_num(v)}" for labels, v in series]
        self._family(f"{name}_total", "counter", COUNTERS[name], samples)
        self.gauge(f"{name}_created", [(lab, self.created) for lab, _ in series], COUNTERS[name])

    def histogram(self, name: str, base: dict[str, str], h: Histogram) -> None:
        counts = h.counts or [0] * len(h.buckets)
        samples = [
            f"{name}_bucket{_labels({**base, 'le': _num(b)})} {_num(c)}"
            for b, c in zip((*h.buckets, math.inf), (*counts, h.count), strict=True)
        ]
        samples += [f"{name}_count{_labels(base)} {_num(h.count)}"]
        samples += [f"{name}_sum{_labels(base)} {_num(h.total)}"]
        help_text = HISTOGRAMS[name][0]
        self._family(name, "histogram", help_text, samples)
        self.gauge(f"{name}_created", [(base, self.created)], help_text)


def render(cfg: EngineConfig, sched: Scheduler, stats: Stats) -> str:
    base = {"engine": "0", "model_name": cfg.model_name}

    def by(label: str, values: dict[str, float]) -> Series:
        return [({**base, label: k}, v) for k, v in values.items()]

    waiting = len(sched.waiting)
    page = _Page(stats.created)
    for name in (
        "vllm:estimated_flops_per_gpu",
        "vllm:estimated_read_bytes_per_gpu",
        "vllm:estimated_write_bytes_per_gpu",
    ):
        page.counter(name, [(base, 0.0)])
    page.gauge("vllm:num_requests_running", [(base, len(sched.running))])
    page.gauge("vllm:num_requests_waiting", [(base, waiting)])
    page.gauge(
        "vllm:num_requests_waiting_by_reason",
        by("reason", {"capacity": waiting, "deferred": 0}),
    )
    page.gauge(
        "vllm:engine_sleep_state",
        by("sleep_state", {s: float(s == "awake") for s in SLEEP_STATES}),
    )
    page.gauge("vllm:kv_cache_usage_perc", [(base, sched.usage)])
    page.counter("vllm:prefix_cache_queries", [(base, stats.prompt_tokens)])
    for name in (
        "vllm:prefix_cache_hits",
        "vllm:external_prefix_cache_queries",
        "vllm:external_prefix_cache_hits",
        "vllm:mm_cache_queries",
        "vllm:mm_cache_hits",
    ):
        page.counter(name, [(base, 0.0)])
    page.counter("vllm:num_preemptions", [(base, sched.preemptions)])
    page.counter("vllm:prompt_tokens", [(base, stats.prompt_tokens)])
    page.counter(
        "vllm:prompt_tokens_by_source",
        by("source", {s: stats.prompt_tokens * (s == "local_compute") for s in PROMPT_SOURCES}),
    )
    page.counter("vllm:prompt_tokens_cached", [(base, 0.0)])
    page.counter(
        "vllm:prompt_tokens_cached_by_source", by("source", dict.fromkeys(CACHED_SOURCES, 0.0))
    )
    page.counter("vllm:generation_tokens", [(base, stats.generation_tokens)])
    page.counter(
        "vllm:request_success",
        by("finished_reason", {r: float(n) for r, n in stats.finished.items()}),
    )
    page.counter(
        "vllm:admission_rejections",
        [({"model_name": cfg.model_name, "reason": r}, 0.0) for r in ADMISSION_REASONS],
    )
    for name in HISTOGRAMS:
        page.histogram(name, base, stats.hist[name])
    page.gauge("vllm:cache_config_info", [(cache_config_labels(cfg), 1.0)])
    return "\n".join(page.lines) + "\n"
