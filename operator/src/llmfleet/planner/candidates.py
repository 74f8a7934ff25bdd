"""Every layout the GPUs allow, evaluated once (memory fit, engine concurrency, predicted speed),
then one chosen by the spec's SLO or objective. `single_node.plan_single_node()` turns the
choice into a Plan.

Choosing, when the GPU has performance constants:
* spec.slo: among layouts whose predicted TTFT (an idle pod, a workload prompt) and batch-1 ITL
  meet it, the one with the most predicted output tokens/s per GPU at the concurrency that keeps
  ITL within the SLO (the cheapest per token); that concurrency becomes --max-num-seqs.
* objective Throughput: the most predicted output tokens/s per GPU; ties go to the narrower pod.
* objective Latency: the lowest predicted ITL of a lone request; ties go to more tokens/s.
Each rule picks among the layouts whose KV cache holds MIN_CONCURRENT_SEQUENCES full-length
(maxModelLen) sequences when there are any.
Without constants (a GPU given by memoryGiB alone) the rules are by memory: Throughput takes the
narrowest layout that holds MIN_CONCURRENT_SEQUENCES full-length sequences, Latency the widest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.status import PlannedStrategy, Prediction
from llmfleet.models.workload import SloSpec
from llmfleet.planner.efficiencies import (
    CALIBRATION_NAME,
    MXFP4_CALIBRATION_NAME,
    SAMPLING_NOTE,
)
from llmfleet.planner.memory import GpuFit
from llmfleet.planner.performance import PodModel

MIN_CONCURRENT_SEQUENCES = 4
# vLLM captures CUDA graphs for batches up to 512 sequences; beyond, decode steps run eagerly.
# Measured on an H100 (bench/gpu/, 2026-11-23): 512 sequences gave 9,715 output tok/s for the
# 512/256 workload, 256 gave 7,663 and vLLM's default of 1024 (KV-bound, preempting) 6,500.
MAX_NUM_SEQS_CAP = 512


@dataclass(frozen=True)
class Workload:
    prompt_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class Evaluated:
    """One candidate layout: `count / tensor_parallel_size` pods of `tensor_parallel_size` GPUs."""

    tensor_parallel_size: int
    replicas: int
    fit: GpuFit
    max_num_seqs: int
    prediction: Prediction | None
    # Sequences of maxModelLen tokens its KV cache holds at once.
    full_length_sequences: int

    @property
    def strategy(self) -> PlannedStrategy:
        return "SinglePod" if self.replicas == 1 else "MultiPod"

    @property
    def per_gpu(self) -> float:
        return self.prediction.output_tokens_per_second_per_gpu if self.prediction else 0.0


def concurrency_for(held: int, set_by_user: int | None) -> int:
    """--max-num-seqs: the `held` workload sequences the KV cache holds (vLLM preempts beyond
    that, so fewer only throttles), up to the CUDA-graph cap."""
    if set_by_user is not None:
        return set_by_user
    return max(1, min(MAX_NUM_SEQS_CAP, held))


def predict(pod: PodModel, concurrency: int, workload: Workload, slo: SloSpec | None) -> Prediction:
    p, o = workload.prompt_tokens, workload.output_tokens
    out = pod.output_tokens_per_s(concurrency, p, o)
    within = None
    if slo is not None and slo.itl_millis is not None:
        within = pod.max_concurrency_within(slo.itl_millis / 1e3, p, o, MAX_NUM_SEQS_CAP)
    return Prediction(
        prompt_tokens=p,
        output_tokens=o,
        concurrency=concurrency,
        output_tokens_per_second=round(out, 1),
        total_tokens_per_second=round(out * workload.tokens / o, 1),
        output_tokens_per_second_per_gpu=round(out / pod.tensor_parallel_size, 1),
        ttft_millis=round(pod.ttft_s(p) * 1e3, 1),
        itl_millis=round(pod.itl_s(concurrency, p, o) * 1e3, 2),
        itl_millis_batch1=round(pod.itl_s(1, p, o) * 1e3, 2),
        max_concurrency_within_slo=within,
        calibration=MXFP4_CALIBRATION_NAME if pod.weight_only_experts else CALIBRATION_NAME,
        sampling=SAMPLING_NOTE,
    )


def meets(candidate: Evaluated, slo: SloSpec) -> bool:
    p = candidate.prediction
    assert p is not None
    if slo.ttft_millis is not None and p.ttft_millis > slo.ttft_millis:
        return False
    return slo.itl_millis is None or (p.max_concurrency_within_slo or 0) >= 1


def roomy(candidates: list[Evaluated]) -> list[Evaluated]:
    """Those holding MIN_CONCURRENT_SEQUENCES full-length sequences, when any does: a layout
    that fits two requests of maxModelLen looks fast for short ones and queues long ones."""
    enough = [c for c in candidates if c.full_length_sequences >= MIN_CONCURRENT_SEQUENCES]
    return enough or candidates


def pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def choose_by_prediction(
    candidates: list[Evaluated], objective: str, slo: SloSpec | None
) -> tuple[Evaluated, str]:
    """The winner and why, by the rules in the module docstring."""
    if slo is not None:
        meeting = [c for c in candidates if meets(c, slo)]
        best = max(roomy(meeting), key=lambda c: (c.per_gpu, -c.tensor_parallel_size))
        return best, (
            f"spec.slo ({_slo_text(slo)}) is met by {len(meeting)} of {len(candidates)} "
            f"layouts; {pods(best.replicas)} of TP={best.tensor_parallel_size} give the most "
            f"output tokens/s per GPU within it ({best.per_gpu:,.0f})."
        )
    candidates = roomy(candidates)
    if objective == "Latency":
        best = min(
            candidates,
            key=lambda c: (
                c.prediction.itl_millis_batch1 if c.prediction else math.inf,
                -c.per_gpu,
            ),
        )
        assert best.prediction is not None
        return best, (
            f"Objective Latency takes the lowest predicted inter-token latency: TP="
            f"{best.tensor_parallel_size} at {best.prediction.itl_millis_batch1:.1f} ms per "
            "token for a lone request."
        )
    best = max(candidates, key=lambda c: (c.per_gpu, -c.tensor_parallel_size))
    return best, (
        f"Objective Throughput takes the most predicted output tokens/s per GPU: "
        f"{pods(best.replicas)} of TP={best.tensor_parallel_size} at {best.per_gpu:,.0f} per "
        "GPU."
    )


def why_lost(candidate: Evaluated, winner: Evaluated, objective: str, slo: SloSpec | None) -> str:
    p, w = candidate.prediction, winner.prediction
    if p is None or w is None:
        return "not chosen by the memory rules"
    if (
        candidate.full_length_sequences < MIN_CONCURRENT_SEQUENCES
        and winner.full_length_sequences >= MIN_CONCURRENT_SEQUENCES
    ):
        return (
            f"its KV cache holds {candidate.full_length_sequences} full-length (maxModelLen) "
            f"sequence{'' if candidate.full_length_sequences == 1 else 's'}, fewer than the "
            f"{MIN_CONCURRENT_SEQUENCES} the planner wants"
        )
    if slo is not None and not meets(candidate, slo):
        return f"misses spec.slo ({_slo_text(slo)}): TTFT {p.ttft_millis:.0f} ms, ITL " + (
            f"{p.itl_millis_batch1:.1f} ms alone"
        )
    if objective == "Latency" and slo is None:
        return f"ITL {p.itl_millis_batch1:.1f} ms alone vs {w.itl_millis_batch1:.1f} ms"
    ratio = candidate.per_gpu / winner.per_gpu if winner.per_gpu else 0
    return f"{candidate.per_gpu:,.0f} out tok/s per GPU, {ratio:.0%} of the chosen layout's"


def _slo_text(slo: SloSpec) -> str:
    parts = []
    if slo.ttft_millis is not None:
        parts.append(f"TTFT <= {slo.ttft_millis} ms")
    if slo.itl_millis is not None:
        parts.append(f"ITL <= {slo.itl_millis} ms")
    return ", ".join(parts)
