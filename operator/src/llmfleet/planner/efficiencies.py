"""What fraction of a GPU's datasheet vLLM reaches, and the fixed costs of its steps: the
constants bench/gpu_model.py fits to the GPU runs of bench/gpu/ (see planner/performance.py for
the model they enter)."""

from __future__ import annotations

from dataclasses import dataclass

# What the predictions stand for, measured on 2 x H200 (bench/gpu_edges.py): the calibration
# runs decode greedily on warm engines.
SAMPLING_NOTE = (
    "greedy decoding on a warm engine; top-p 0.95 measured 3 % fewer output tokens/s, and an "
    "engine's first run at a new batch size 13 % fewer with top-p (vLLM 0.26.0 without FlashInfer)"
)
# Fitted by bench/gpu_model.py (see its output, bench/gpu/calibration.json).
CALIBRATION_NAME = (
    "vLLM 0.26.0: NVIDIA H100 80GB HBM3 2026-11-23 and NVIDIA H200 2026-11-27 (bf16); "
    "NVIDIA H200 2026-11-24 (fp8)"
)
# gpt-oss on one H200 (bench/gpu_mxfp4.py): MXFP4_LAYER_OVERHEAD_US brings batch-1 ITL within
# 1.4 % on both models, but what it was not fitted to (saturation, prefill at 512 tokens) stays
# far off and steps above batch 8 spread up to 2.9x run to run, so its predictions say so.
MXFP4_CALIBRATION_NAME = (
    "not calibrated for MXFP4 experts: on an H200 (vLLM 0.26.0, 2026-11-28) the planner "
    "predicted gpt-oss-20b's greedy saturation 36 % high and gpt-oss-120b's 46 % low, and "
    "decode steps above batch 8 spread up to 2.9x run to run"
)
MEMORY_EFFICIENCY = 0.824
COMPUTE_EFFICIENCY = 0.732
# Fitted to zero once the costs below are per layer: the 1.25 ms the 32-layer calibration found
# alone was 32 x the per-layer cost (vLLM 0.26 schedules the next step while the GPU runs).
STEP_OVERHEAD_MS = 0.0
FP8_COMPUTE_EFFICIENCY = 0.624
FP8_LAYER_OVERHEAD_US = 0.0
# Depth-scaled fixed costs (bf16 and fp8 alike). A 60-layer and a 48-layer shape at batch 1
# measured 0.9 ms more per step than a 32-layer-calibrated constant predicted: kernel launches
# and the norms, rotary and residual adds each layer pays whatever the batch. Attention kernels
# run per layer, so a sequence's cost grows with depth too.
LAYER_OVERHEAD_US = 27.2
SEQUENCE_LAYER_OVERHEAD_US = 0.187
# TP > 1: what a tensor-parallel layer costs beyond allreduce.py's two all-reduces (the ranks'
# synchronisation and vLLM's custom all-reduce launch): 11 us per layer at TP 2 on H200s.
TP_LAYER_OVERHEAD_US = 10.9
# Prompts prefilled in a saturated run: the share of a lone prompt's prefill speed they get. Four
# H200s running Llama-3.1-70B's shape at 2,048 in / 128 out (1 x TP4, 2 x TP2, 4 x TP1; bf16 and
# fp8; 2026-11-27) made 7-13 % fewer tokens/s than a lone prompt's measured-true TTFT implied, at
# every TP size (so not the all-reduce), while 512/256 runs held within 1-7 %. Fitted to those ten
# runs (mean error 0.1 %); it also brings the held-out shapes' worst case from 6.6 % to 4.3 %. A
# batch-1 TTFT keeps the burst rate it was fitted to.
SATURATED_PREFILL_EFFICIENCY = 0.91
# Weight-only kernels (w4a16, w8a16: AWQ, GPTQ, compressed-tensors weight-only; vLLM 0.26 runs
# them through Machete on Hopper) read their packed weights at this fraction of the HBM bandwidth,
# not MEMORY_EFFICIENCY, and their reads overlap the 16-bit multiplies no better than fp8's do
# (the quadrature sum). Qwen2.5-7B-Instruct-AWQ on one H200 (2026-11-27, bench/gpu/
# quant_drift.sh w4): its decode step at 1-16 sequences was only 22-26 % shorter than the same
# shape's in 16 bits, for 3.7 x fewer weight bytes. Fitted (0.361) to that engine's decode steps;
# the GPTQ-Int4 engine and the earlier AWQ run check it.
WEIGHT_ONLY_MEMORY_EFFICIENCY = 0.36
# MXFP4 experts on vLLM's TRITON MoE backend (catalog/mxfp4_triton.py): what each MoE layer pays
# per step whatever the batch, beyond the dense per-layer cost: triton_kernels' routing (the
# _topk_forward and _combined_routing_* kernels vLLM's log names) and two matmul_ogs calls.
# gpt-oss-20b (24 layers) and -120b (36 layers) on one H200 (2026-11-28, warm engines): batch-1
# ITL 2.975-2.99 ms and 4.29-4.34 ms, 27-30 us per layer above the model without it in both.
# Fitted (bench/gpu_model.py --fit-mxfp4) to both engines' batch-1 steps; fitted to either alone
# it predicts the other's within 2.1 %.
MXFP4_LAYER_OVERHEAD_US = 28.1


@dataclass(frozen=True)
class Efficiencies:
    """What fraction of the datasheet vLLM achieves, and its fixed costs."""

    memory: float = MEMORY_EFFICIENCY
    compute: float = COMPUTE_EFFICIENCY
    step_overhead_ms: float = STEP_OVERHEAD_MS
    fp8_compute: float = FP8_COMPUTE_EFFICIENCY
    fp8_layer_overhead_us: float = FP8_LAYER_OVERHEAD_US
    layer_overhead_us: float = LAYER_OVERHEAD_US
    sequence_layer_overhead_us: float = SEQUENCE_LAYER_OVERHEAD_US
    tp_layer_overhead_us: float = TP_LAYER_OVERHEAD_US
    saturated_prefill: float = SATURATED_PREFILL_EFFICIENCY
    weight_only_memory: float = WEIGHT_ONLY_MEMORY_EFFICIENCY
    mxfp4_layer_overhead_us: float = MXFP4_LAYER_OVERHEAD_US


CALIBRATED = Efficiencies()
