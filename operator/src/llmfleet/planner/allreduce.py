"""How long one tensor-parallel all-reduce takes in vLLM, fitted to published latency tables.

vLLM 0.32 (vllm/distributed/device_communicators/) reduces a tensor of fewer than
`custom_allreduce_max_bytes(tp)` bytes with its custom all-reduce, which reads the peers'
buffers over NVLink inside the CUDA graph; larger ones go to PyTorch symmetric memory or NCCL.
Each side costs a latency floor plus the ring all-reduce's bus bytes, 2 (TP-1)/TP of the
message, at a fraction of the GPU profile's NVLink bandwidth. The floors and fractions are fitted
by bench/allreduce_fit.py to aiconfigurator-core 0.12.0's tables (Apache-2.0; vLLM 0.24.0's
custom all-reduce under CUDA graphs and NCCL 2.29.2, bf16, H100 SXM and H200 SXM, TP 2/4/8;
bench/data/allreduce/). They hold no symmetric-memory figures, so NCCL's stand in for it:
symmetric memory is the faster, so the model errs slow for mid-sized messages.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2


@dataclass(frozen=True)
class AllreduceFit:
    """Latency floors (µs) and achieved fractions of NVLink bandwidth at one TP size."""

    custom_floor_us: float
    custom_bandwidth_fraction: float
    nccl_floor_us: float
    nccl_bandwidth_fraction: float


# Fitted by bench/allreduce_fit.py (`make bench BENCH=tp_published` checks they are current).
ALLREDUCE_FIT: dict[int, AllreduceFit] = {
    2: AllreduceFit(4.35, 0.584, 20.95, 0.674),
    4: AllreduceFit(4.71, 0.491, 25.53, 0.766),
    8: AllreduceFit(4.78, 0.157, 21.22, 0.868),
}


def custom_allreduce_max_bytes(tensor_parallel_size: int) -> int:
    """vLLM's custom all-reduce limit on Hopper: 8 MiB (CustomAllreduce's buffer), cut to
    CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"] (all_reduce_utils.py) where symmetric memory takes over;
    0 where the custom kernel does not run (world sizes other than 2, 4, 6 and 8)."""
    return {2: 8 * MIB, 4: 8 * MIB, 6: MIB // 2, 8: MIB // 4}.get(tensor_parallel_size, 0)


def _fit_for(tensor_parallel_size: int) -> AllreduceFit:
    """The fitted TP size at or above this one (6 takes 8's), the largest beyond 8."""
    fitted = sorted(ALLREDUCE_FIT)
    return ALLREDUCE_FIT[next((tp for tp in fitted if tp >= tensor_parallel_size), fitted[-1])]


def allreduce_s(message_bytes: float, tensor_parallel_size: int, nvlink_gbps: float) -> float:
    """One all-reduce of `message_bytes` over `tensor_parallel_size` GPUs linked at
    `nvlink_gbps` per direction; 0 on one GPU."""
    tp = tensor_parallel_size
    if tp <= 1:
        return 0.0
    fit = _fit_for(tp)
    bus = 2 * (tp - 1) / tp * message_bytes
    if message_bytes < custom_allreduce_max_bytes(tp):
        floor, fraction = fit.custom_floor_us, fit.custom_bandwidth_fraction
    else:
        floor, fraction = fit.nccl_floor_us, fit.nccl_bandwidth_fraction
    return floor * 1e-6 + bus / (fraction * nvlink_gbps * 1e9)
