"""Predicted speed of one vLLM pod: a roofline model with efficiencies fitted to real vLLM runs.

Per engine step vLLM runs every scheduled token (one per running sequence, plus any prompt
chunk) through the model once:

* linear layers: read this GPU's weights from HBM, or do 2 x parameters / TP FLOPs per token,
  whichever takes longer (small batches are bandwidth-bound, large ones compute-bound);
* attention: read every running sequence's KV cache (context x KV bytes per token per GPU)
  and, for prompt tokens, the causal QK^T and AV FLOPs (2 x layers x hidden x length^2 / TP);
* with TP > 1, two all-reduces of the step's activations per layer (planner/allreduce.py:
  vLLM's custom all-reduce or NCCL by message size, fitted to published latency tables), plus
  a measured per-layer cost of the tensor-parallel step;
* fixed costs that scale with depth: a per-layer cost of every step and a per-layer cost of
  every running sequence (a fixed per-step cost is kept, fitted to zero), and for MXFP4 experts
  on vLLM's TRITON MoE backend a per-layer cost of its MoE step (routing kernels and two
  matmul_ogs launches; fitted to gpt-oss-20b's and -120b's batch-1 steps, planner/efficiencies.py).

Bandwidths and peaks are the GPU profile's datasheet figures; the efficiencies (what fraction
of them vLLM achieves) and fixed costs are fitted by bench/gpu_model.py (vLLM 0.26.0, bf16) to
the H100 Llama-3.1-8B sweep of 2026-11-23 (32 layers) together with a 60-layer shape
(bench/gpu/models/heldout-deep-10b, TP 1 and TP 2 on H200s, 2026-11-27): one depth alone cannot
tell a per-layer cost from a per-step one. A 48-layer shape (heldout-wide-17b, TP 1 and TP 2),
the other TP 2 runs (Llama-3.1-8B, Llama-3.1-70B fp8) and every earlier validation point stay
out of the fit and check it.
Weights quantized to fp8 on load (vLLM --quantization fp8) have their own two constants,
fitted to Llama-3.1-70B on one H200 (2026-11-24) with the bf16 ones held fixed, and checked on
one H100: the linear layers' fraction of the fp8 peak (cutlass scaled-mm at these shapes reaches
about 62 % of it, not the bf16 GEMMs' 73 %), and an extra per-layer cost (activation
quantization), which the fit puts at zero now that every layer pays layer_overhead_us.
Attention stays in bf16, so its FLOPs count at the bf16 peak; an fp8 KV cache
(spec.engine.kvCacheDtype) halves the KV bytes a step reads.

Pre-quantized checkpoints run the kernel their format runs (planner/weights.py): w8a8 (fp8 and
int8 weights with quantized activations) takes the fp8 constants above, int8 at the fp8 peak
(equal on H100/H200) and block-scaled fp8 with the per-tensor constants; w4a16 and w8a16 (AWQ,
GPTQ, compressed-tensors weight-only) read their packed weights' bytes at the lower efficiency
those kernels reach (planner/efficiencies.py) and multiply at the bf16 rate (Marlin and Machete
dequantize to 16 bits), the two in quadrature as fp8's; measured on one H200 (bench/gpu/
quant_drift.sh). bench/tp_published.py checks the whole model against published
tensor-parallel vLLM results.

Model families change what a step reads and computes: a mixture of experts does 2 x active
parameters FLOPs per token and reads the shared weights plus the experts its tokens touch (B
tokens each picking k of E experts touch E (1 - (1 - k/E)^B) of them per layer, expected);
sliding-window layers read at most the window of each sequence's context and attend to at most
the window of a prompt; multi-latent attention reads the latent (every GPU holds all of it).

A request of P prompt and O output tokens costs the pod its prefill (chunked at
max-num-batched-tokens) and O decode steps at a context of about P + O/2. With C sequences
running, the pod's throughput is C x O / (prefill of C prompts + O steps at batch C), whether
prompts arrive together or one by one (chunked prefill mixes them into the same steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.engine import KvCacheDtype
from llmfleet.models.model_spec import Dtype, ModelArchitecture, Quantization
from llmfleet.planner.allreduce import allreduce_s
from llmfleet.planner.efficiencies import CALIBRATED, Efficiencies
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_layer, kv_dtype, sliding_layers
from llmfleet.planner.memory import GIB, routed_expert_bytes, weights_gib
from llmfleet.planner.weights import Weights, as_weights


@dataclass(frozen=True)
class Gpu:
    """Datasheet figures of one GPU."""

    hbm_gbps: float
    bf16_tflops: float
    fp8_tflops: float | None
    interconnect_gbps: float


@dataclass(frozen=True)
class PodModel:
    """One vLLM pod as the model sees it: per-GPU bytes and FLOPs at its tensor-parallel size."""

    gpu: Gpu
    parameters: float  # count
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    layers: int
    hidden: int
    tensor_parallel_size: int
    fp8_compute: bool
    max_num_batched_tokens: int
    # w4a16 / w8a16 checkpoints: packed weights dequantized to 16 bits inside the GEMM.
    weight_only: bool = False
    # Only the routed experts are packed (MXFP4): the other weights read at the 16-bit rate.
    weight_only_experts: bool = False
    efficiencies: Efficiencies = CALIBRATED
    # Sliding-window layers (of `layers`): their KV bytes per token and the window they read.
    sliding_layers: int = 0
    sliding_kv_bytes_per_token_per_gpu: float = 0.0
    sliding_window: int = 0
    # Mixture of experts: the routed experts' share of weight_bytes_per_gpu, and E and k.
    expert_bytes_per_gpu: float = 0.0
    experts: int = 0
    experts_per_token: int = 0

    @property
    def _bandwidth(self) -> float:
        return self.gpu.hbm_gbps * 1e9 * self.efficiencies.memory

    @property
    def _fp8_math(self) -> bool:
        return self.fp8_compute and self.gpu.fp8_tflops is not None

    @property
    def _flops(self) -> float:
        """The linear layers' FLOP/s."""
        if self.gpu.fp8_tflops is not None and self.fp8_compute:
            return self.gpu.fp8_tflops * 1e12 * self.efficiencies.fp8_compute
        return self._bf16_flops

    @property
    def _bf16_flops(self) -> float:
        return self.gpu.bf16_tflops * 1e12 * self.efficiencies.compute

    def _allreduce_s(self, tokens: float) -> float:
        message = tokens * self.hidden * 2  # bf16 activations
        one = allreduce_s(message, self.tensor_parallel_size, self.gpu.interconnect_gbps)
        # After attention and after the MLP, in every layer.
        return self.layers * 2 * one

    def _weight_bytes_read(self, tokens: float) -> float:
        """This GPU's weights a step of `tokens` tokens reads: all of them for a dense model; the
        shared ones and the experts the tokens touch (expected) for a mixture of experts."""
        if not self.experts:
            return self.weight_bytes_per_gpu
        return self.weight_bytes_per_gpu - self.expert_bytes_per_gpu + self._experts_read(tokens)

    def _experts_read(self, tokens: float) -> float:
        untouched = math.pow(1 - self.experts_per_token / self.experts, tokens)
        return self.expert_bytes_per_gpu * (1 - untouched)

    def _weights_s(self, tokens: float) -> float:
        """Reading this step's weights: packed ones at the weight-only kernels' efficiency."""
        read = self._weight_bytes_read(tokens)
        if not self.weight_only:
            return read / self._bandwidth
        packed = self._experts_read(tokens) if self.weight_only_experts else read
        slow = self.gpu.hbm_gbps * 1e9 * self.efficiencies.weight_only_memory
        return (read - packed) / self._bandwidth + packed / slow

    def _attended(self, context: float) -> float:
        """Layers x tokens a token attends to at `context`, sliding layers capped at the window."""
        full = (self.layers - self.sliding_layers) * context
        return full + self.sliding_layers * min(context, self.sliding_window)

    def step_s(
        self, sequences: float, context: float, prompt_tokens: float = 0, prompt_len: float = 0
    ) -> float:
        """One engine step: `sequences` decoding at average `context`, plus `prompt_tokens`
        of prompts `prompt_len` long prefilled in the same step."""
        tokens = sequences + prompt_tokens
        linear_flops = tokens * 2 * self.parameters / self.tensor_parallel_size
        weights_s = self._weights_s(tokens)
        if self._fp8_math or self.weight_only:
            # fp8 and weight-only GEMMs between the two rooflines run below both: neither bound
            # alone fits the measured steps (bench/gpu/ 2026-11-24, -27), their quadrature sum does.
            linear = math.hypot(weights_s, linear_flops / self._flops)
        else:
            linear = max(weights_s, linear_flops / self._flops)
        kv_bytes = context * self.kv_bytes_per_token_per_gpu
        kv_bytes += min(context, self.sliding_window) * self.sliding_kv_bytes_per_token_per_gpu
        kv_read = sequences * kv_bytes / self._bandwidth
        # Causal attention over a prompt: each token attends to half the prompt on average.
        attention_flops = 2 * self.hidden * prompt_tokens * self._attended(prompt_len)
        attention = attention_flops / self.tensor_parallel_size / self._bf16_flops
        return self._fixed_s(sequences) + linear + kv_read + attention + self._allreduce_s(tokens)

    def _fixed_s(self, sequences: float) -> float:
        """A step's costs that do not scale with bytes or FLOPs: per layer, per layer and
        sequence, per tensor-parallel layer (see the constants)."""
        e = self.efficiencies
        per_layer = e.layer_overhead_us + sequences * e.sequence_layer_overhead_us
        if self._fp8_math:
            per_layer += e.fp8_layer_overhead_us
        if self.weight_only_experts:
            per_layer += e.mxfp4_layer_overhead_us
        if self.tensor_parallel_size > 1:
            per_layer += e.tp_layer_overhead_us
        return e.step_overhead_ms * 1e-3 + self.layers * per_layer * 1e-6

    def prefill_s(self, prompts: int, prompt_len: int) -> float:
        """Prefill `prompts` prompts of `prompt_len` tokens, in chunks of max-num-batched-tokens,
        up to the first token of each."""
        total = prompts * prompt_len
        chunk = self.max_num_batched_tokens
        steps = max(1, math.ceil(total / chunk))
        per_step = total / steps
        return steps * self.step_s(0, 0, per_step, prompt_len) + self.step_s(prompts, prompt_len)

    def ttft_s(self, prompt_len: int) -> float:
        return self.prefill_s(1, prompt_len)

    def itl_s(self, concurrency: int, prompt_len: int, output_len: int) -> float:
        return self.step_s(concurrency, prompt_len + output_len / 2)

    def batch_wall_s(self, concurrency: int, prompt_len: int, output_len: int) -> float:
        """`concurrency` requests submitted together, each generating `output_len` tokens."""
        decode = (output_len - 1) * self.itl_s(concurrency, prompt_len, output_len)
        prefill = self.prefill_s(concurrency, prompt_len) / self.efficiencies.saturated_prefill
        return prefill + decode

    def output_tokens_per_s(self, concurrency: int, prompt_len: int, output_len: int) -> float:
        return concurrency * output_len / self.batch_wall_s(concurrency, prompt_len, output_len)

    def max_concurrency_within(
        self, itl_s: float, prompt_len: int, output_len: int, upper: int
    ) -> int:
        """Most sequences (up to `upper`) whose inter-token latency stays within `itl_s`; 0 when
        not even one does."""
        low, high = 0, upper
        while low < high:
            middle = (low + high + 1) // 2
            if self.itl_s(middle, prompt_len, output_len) <= itl_s:
                low = middle
            else:
                high = middle - 1
        return low


def pod_model(
    arch: ModelArchitecture,
    *,
    dtype: Dtype,
    quantization: Quantization | Weights,
    tensor_parallel_size: int,
    gpu: Gpu,
    max_num_batched_tokens: int,
    efficiencies: Efficiencies = CALIBRATED,
    kv_cache_dtype: KvCacheDtype = "auto",
) -> PodModel:
    weights = as_weights(dtype, quantization)
    kv = kv_dtype(dtype, kv_cache_dtype)
    per_layer = kv_bytes_per_token_per_layer(arch, kv, tensor_parallel_size)
    sliding = sliding_layers(arch)
    experts, per_token = arch.num_experts or 0, arch.num_experts_per_token or 0
    active = arch.active_parameters_billions or arch.parameters_billions
    # Active = shared + routed x k/E and total = shared + routed, so routed is:
    routed = (arch.parameters_billions - active) / (1 - per_token / experts) if experts else 0.0
    return PodModel(
        gpu=gpu,
        parameters=active * 1e9,
        weight_bytes_per_gpu=(
            weights_gib(arch, dtype, weights, tensor_parallel_size) * GIB / tensor_parallel_size
        ),
        kv_bytes_per_token_per_gpu=(arch.num_layers - sliding) * per_layer,
        layers=arch.num_layers,
        hidden=arch.num_attention_heads * arch.head_dim,
        tensor_parallel_size=tensor_parallel_size,
        fp8_compute=weights.kernel == "w8a8",
        weight_only=weights.kernel in ("w4a16", "w8a16"),
        weight_only_experts=weights.checkpoint is not None
        and weights.checkpoint.format.experts_only,
        max_num_batched_tokens=max_num_batched_tokens,
        efficiencies=efficiencies,
        sliding_layers=sliding,
        sliding_kv_bytes_per_token_per_gpu=sliding * per_layer,
        sliding_window=arch.sliding_window or 0,
        expert_bytes_per_gpu=(
            routed_expert_bytes(arch, dtype, weights, routed * 1e9) / tensor_parallel_size
        ),
        experts=experts,
        experts_per_token=per_token,
    )
