"""Fit the planner's all-reduce model to published latency tables (bench/data/allreduce/).

vLLM 0.32 on NVLink-connected Hopper GPUs reduces a message below
`custom_allreduce_max_bytes(tp)` with its custom all-reduce (inside CUDA graphs) and anything
larger with PyTorch symmetric memory or NCCL; the tables have no symmetric-memory figures, so
NCCL's stand in above the threshold (symmetric memory is the faster of the two there, so the
model errs slow). Each side is `floor + bus bytes / bandwidth`, bus bytes being the ring
all-reduce's 2 (TP-1)/TP of the message; the floor and the bandwidth, as a fraction of the
GPU profile's NVLink figure, are fitted per TP by least squares on relative error over H100
and H200 together (both have 450 GB/s of NVLink per direction).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from llmfleet.planner.allreduce import (
    ALLREDUCE_FIT,
    AllreduceFit,
    allreduce_s,
    custom_allreduce_max_bytes,
)

DATA = Path(__file__).resolve().parent / "data" / "allreduce"
GPUS = ("h100_sxm", "h200_sxm")
NVLINK_GBPS = 450.0
TENSOR_PARALLEL_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class Sample:
    gpu: str
    backend: str  # "vllm_custom" or "nccl"
    tp: int
    message_bytes: int
    latency_us: float


def load(gpus: tuple[str, ...] = GPUS) -> list[Sample]:
    samples = []
    for gpu in gpus:
        with (DATA / f"{gpu}.csv").open() as f:
            for row in csv.DictReader(f):
                samples.append(
                    Sample(
                        gpu,
                        row["backend"],
                        int(row["tp"]),
                        int(row["message_bytes"]),
                        float(row["latency_us"]),
                    )
                )
    return samples


def used_by_vllm(sample: Sample) -> bool:
    """Whether vLLM 0.32 sends a message of this size to this sample's backend."""
    custom = sample.message_bytes < custom_allreduce_max_bytes(sample.tp)
    return custom == (sample.backend == "vllm_custom")


def bus_bytes(message_bytes: float, tp: int) -> float:
    return 2 * (tp - 1) / tp * message_bytes


def _fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """`y = a + b x` minimising the squared relative error: weighted least squares, 1/y^2."""
    sw = sx = sy = sxx = sxy = 0.0
    for x, y in points:
        w = 1 / (y * y)
        sw, sx, sy = sw + w, sx + w * x, sy + w * y
        sxx, sxy = sxx + w * x * x, sxy + w * x * y
    b = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return (sy - b * sx) / sw, b


def fit(samples: list[Sample]) -> dict[int, AllreduceFit]:
    fitted = {}
    for tp in TENSOR_PARALLEL_SIZES:
        sides = {}
        for backend in ("vllm_custom", "nccl"):
            points = [
                (bus_bytes(s.message_bytes, tp), s.latency_us * 1e-6)
                for s in samples
                if s.tp == tp and s.backend == backend and used_by_vllm(s)
            ]
            floor, seconds_per_byte = _fit_line(points)
            fraction = 1 / (seconds_per_byte * NVLINK_GBPS * 1e9)
            sides[backend] = (round(floor * 1e6, 2), round(fraction, 3))
        fitted[tp] = AllreduceFit(*sides["vllm_custom"], *sides["nccl"])
    return fitted


def errors_pct(samples: list[Sample]) -> list[tuple[Sample, float]]:
    """The planner's all-reduce time against each table entry vLLM would use, in %."""
    out = []
    for s in samples:
        if not used_by_vllm(s):
            continue
        predicted = allreduce_s(s.message_bytes, s.tp, NVLINK_GBPS) * 1e6
        out.append((s, 100 * (predicted - s.latency_us) / s.latency_us))
    return out


def stale_constants(samples: list[Sample]) -> dict[int, tuple[AllreduceFit, AllreduceFit]]:
    """Tensor-parallel sizes whose constants in performance.py differ from a fresh fit."""
    fresh = fit(samples)
    return {tp: (ALLREDUCE_FIT[tp], f) for tp, f in fresh.items() if ALLREDUCE_FIT[tp] != f}


PLOT = Path(__file__).resolve().parent / "plots" / "allreduce_fit.png"


def plot(samples: list[Sample]) -> None:
    """bench/plots/allreduce_fit.png: the table (points) and the fitted model (lines), H100."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(TENSOR_PARALLEL_SIZES), figsize=(14, 4.4), sharey=True)
    for ax, tp in zip(axes, TENSOR_PARALLEL_SIZES, strict=True):
        for backend, colour in (("vllm_custom", "tab:blue"), ("nccl", "tab:orange")):
            table = [s for s in samples if s.gpu == "h100_sxm" and s.tp == tp]
            table = [s for s in table if s.backend == backend]
            used = [s for s in table if used_by_vllm(s)]
            ax.scatter(
                [s.message_bytes for s in table],
                [s.latency_us for s in table],
                s=12,
                color=colour,
                alpha=0.35,
                label=f"{backend} (table)",
            )
            ax.plot(
                [s.message_bytes for s in used],
                [allreduce_s(s.message_bytes, tp, NVLINK_GBPS) * 1e6 for s in used],
                color=colour,
                label=f"{backend} (model, where vLLM uses it)",
            )
        ax.axvline(custom_allreduce_max_bytes(tp), color="grey", linestyle=":")
        ax.set(xscale="log", yscale="log", title=f"H100 SXM, TP={tp}", xlabel="message bytes")
    axes[0].set_ylabel("all-reduce latency (µs)")
    axes[0].legend(fontsize=7)
    fig.suptitle("All-reduce: aiconfigurator-core 0.12.0 tables against planner/allreduce.py")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)
