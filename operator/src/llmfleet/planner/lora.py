"""LoRA's memory: vLLM's adapter buffers on each GPU and its CPU cache of adapters (vLLM 0.32:
vllm/lora/layers/*.py `create_lora_weights`, vllm/lora/model_manager.py).

* At start vLLM wraps every linear layer of every transformer layer (q/k/v packed as qkv, o,
  gate/up packed, down), the input embeddings and the output head, and gives each wrapped
  module zeroed buffers for --max-loras adapters at --max-lora-rank, in the model's dtype:
  per packed slice an A of rank x input and a B of output x rank. They are sharded as their
  layer is: column-parallel layers (qkv, gate/up) split B's output over the tensor-parallel
  GPUs and keep A whole; row-parallel ones (o, down) split A's input and keep B whole
  (--fully-sharded-loras also splits A's rank and B's output there). Pipeline stages hold their
  own layers; the embeddings and the head stay whole on the first and last stage. vLLM
  allocates the buffers while loading the model, so they come off the KV cache.
* Each engine worker (one per GPU) keeps --max-cpu-loras adapters loaded in host memory, whole:
  an adapter of every linear layer at the highest rank, in the model's dtype.

Neither depends on the adapter list: adding an adapter never changes vLLM's flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmfleet.models.adapters import (
    CPU_ADAPTERS_PER_SLOT,
    DEFAULT_MAX_ADAPTERS,
    DEFAULT_MAX_RANK,
    LORA_RANKS,
    LoraSpec,
)
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.engine import KvCacheDtype
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.engine_args import EXTRA_ARGS_FIELD, ArgGroup, parse_int_override
from llmfleet.planner.errors import PlanError
from llmfleet.planner.kv_cache import (
    kv_bytes_per_element,
    kv_bytes_per_token_per_gpu,
    kv_dtype,
    kv_heads_per_gpu,
    kv_tokens_in,
    layers_per_stage,
)
from llmfleet.planner.memory import GIB, round_down, round_up
from llmfleet.planner.result import LoraPlan, Plan

LORA_FIELD = "spec.engine.lora"
# q/k/v, o, gate/up and down: the slices a gated MLP's transformer layer wraps.
_QKV_SLICES = 3
_GATE_UP_SLICES = 2


@dataclass(frozen=True)
class LoraSettings:
    """vLLM's LoRA flags after defaults and extraArgs overrides."""

    max_adapters: int
    max_rank: int
    max_cpu_adapters: int
    fully_sharded: bool = False
    # vLLM's --lora-dtype (float16 or bfloat16) when given, else the model's dtype.
    element_bytes: int = 2


def lora_settings(spec: LLMDeploymentSpec, extra: tuple[ArgGroup, ...]) -> LoraSettings | None:
    """None when the engines run without LoRA."""
    if not spec.lora_enabled:
        return None
    lora = spec.engine.lora or LoraSpec()
    max_adapters = (
        parse_int_override(extra, "--max-loras", 1) or lora.max_adapters or DEFAULT_MAX_ADAPTERS
    )
    max_rank = parse_int_override(extra, "--max-lora-rank", 1) or lora.max_rank or DEFAULT_MAX_RANK
    if max_rank not in LORA_RANKS:
        raise PlanError(
            EXTRA_ARGS_FIELD,
            f"--max-lora-rank {max_rank} is not a rank vLLM accepts: one of "
            + ", ".join(map(str, LORA_RANKS)),
        )
    from_args = parse_int_override(extra, "--max-cpu-loras", 1)
    max_cpu = from_args or lora.max_cpu_adapters or CPU_ADAPTERS_PER_SLOT * max_adapters
    if max_cpu < max_adapters:
        raise PlanError(
            EXTRA_ARGS_FIELD,
            f"--max-cpu-loras {max_cpu} is below --max-loras {max_adapters} "
            f"({'from extraArgs' if from_args else 'spec.engine.lora.maxCpuAdapters'}): vLLM's "
            "CPU cache also holds every adapter on the GPUs",
        )
    dtype_bytes = kv_bytes_per_element(spec.model.dtype)
    return LoraSettings(
        max_adapters=max_adapters,
        max_rank=max_rank,
        max_cpu_adapters=max_cpu,
        fully_sharded=any(group.flag == "--fully-sharded-loras" for group in extra),
        element_bytes=2 if _given(extra, "--lora-dtype") else dtype_bytes,
    )


def _given(extra: tuple[ArgGroup, ...], flag: str) -> bool:
    return any(group.flag == flag and group.value not in (None, "auto") for group in extra)


def lora_args(lora: LoraSettings | None) -> list[tuple[str, tuple[str, ...]]]:
    if lora is None:
        return []
    return [
        ("--enable-lora", ()),
        ("--max-loras", (str(lora.max_adapters),)),
        ("--max-lora-rank", (str(lora.max_rank),)),
        ("--max-cpu-loras", (str(lora.max_cpu_adapters),)),
    ]


def hidden_size(arch: ModelArchitecture) -> int:
    return arch.hidden_size or arch.num_attention_heads * arch.head_dim


def intermediate_size(arch: ModelArchitecture) -> int:
    """config.json's intermediate_size, else what the parameters leave for a gated MLP once the
    attention projections and the embeddings (where the vocabulary is known) are counted."""
    if arch.intermediate_size is not None:
        return arch.intermediate_size
    hidden = hidden_size(arch)
    attention = hidden * 2 * (arch.num_attention_heads + arch.num_key_value_heads) * arch.head_dim
    vocab = arch.vocab_size or 0
    embeddings = (1 if arch.tie_word_embeddings else 2) * vocab * hidden
    per_layer_mlp = (arch.parameters_billions * 1e9 - embeddings) / arch.num_layers - attention
    return max(1, math.ceil(per_layer_mlp / (_GATE_UP_SLICES + 1) / hidden))


def gpu_buffer_bytes(
    arch: ModelArchitecture,
    lora: LoraSettings,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> int:
    """vLLM's LoRA buffers on one GPU of the deepest pipeline stage."""
    tp, rank = tensor_parallel_size, lora.max_rank
    hidden, q_out = hidden_size(arch), arch.num_attention_heads * arch.head_dim // tp
    kv_out = kv_heads_per_gpu(arch, tp) * arch.head_dim
    mlp_out = math.ceil(intermediate_size(arch) / tp)
    column_a_rank = rank // tp if lora.fully_sharded else rank
    row_b_out = math.ceil(hidden / tp) if lora.fully_sharded else hidden
    qkv = _QKV_SLICES * column_a_rank * hidden + (q_out + 2 * kv_out) * rank
    gate_up = _GATE_UP_SLICES * (column_a_rank * hidden + mlp_out * rank)
    o_proj = rank * q_out + row_b_out * rank
    down = rank * mlp_out + row_b_out * rank
    per_layer = qkv + gate_up + o_proj + down
    layers = layers_per_stage(arch, pipeline_parallel_size)
    # The embeddings on the first stage, the output head on the last: both when there is one.
    vocab_modules = 2 if pipeline_parallel_size == 1 else 1
    vocab = vocab_modules * (arch.vocab_size + hidden) * rank if arch.vocab_size else 0
    return lora.max_adapters * (layers * per_layer + vocab) * lora.element_bytes


def adapter_bytes(arch: ModelArchitecture, lora: LoraSettings) -> int:
    """One adapter of every linear layer at the highest rank, whole, as vLLM holds it on CPU."""
    hidden, q_out = hidden_size(arch), arch.num_attention_heads * arch.head_dim
    kv_out, mlp = arch.num_key_value_heads * arch.head_dim, intermediate_size(arch)
    # A (rank x input) and B (output x rank) of q, k, v, o, gate, up and down.
    inputs_and_outputs = (
        (_QKV_SLICES * hidden + q_out + 2 * kv_out)
        + (q_out + hidden)
        + _GATE_UP_SLICES * (hidden + mlp)
        + (mlp + hidden)
    )
    return arch.num_layers * inputs_and_outputs * lora.max_rank * lora.element_bytes


def lora_plan(
    arch: ModelArchitecture,
    lora: LoraSettings | None,
    *,
    tensor_parallel_size: int,
    pipeline_parallel_size: int = 1,
) -> LoraPlan | None:
    """The LoRA part of a plan whose pods run `tensor_parallel_size` engine workers each."""
    if lora is None:
        return None
    return LoraPlan(
        max_adapters=lora.max_adapters,
        max_rank=lora.max_rank,
        max_cpu_adapters=lora.max_cpu_adapters,
        gpu_bytes_per_gpu=gpu_buffer_bytes(
            arch, lora, tensor_parallel_size, pipeline_parallel_size
        ),
        cpu_bytes_per_pod=tensor_parallel_size * lora.max_cpu_adapters * adapter_bytes(arch, lora),
    )


def explain_lora(plan: LoraPlan, *, on_gpus: bool = True) -> str:
    where = "each GPU, taken from the KV cache" if on_gpus else "host memory"
    return (
        f"LoRA: up to {plan.max_adapters} adapters of rank at most {plan.max_rank} at once "
        f"({round_up(plan.gpu_gib_per_gpu):.2f} GiB of buffers on {where}), "
        f"{plan.max_cpu_adapters} in the CPU cache ({round_up(plan.cpu_gib_per_pod):.2f} GiB of "
        "host memory per pod)."
    )


def buffer_gib(arch: ModelArchitecture, lora: LoraSettings | None, tp: int, pp: int = 1) -> float:
    """The buffers in GiB, rounded up as the memory fit's other figures are."""
    if lora is None:
        return 0.0
    return round_up(gpu_buffer_bytes(arch, lora, tp, pp) / GIB)


def lora_does_not_fit(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    lora: LoraSettings,
    max_model_len: int,
    without: Plan,
    *,
    kv_cache_dtype: KvCacheDtype = "auto",
) -> PlanError:
    """The refusal when the spec plans without LoRA but not with it: the numbers at the layout
    it gets without, and the settings that would fit there."""
    tp, pp = without.tensor_parallel_size, without.pipeline_parallel_size
    room = without.kv_cache_gib_per_gpu
    kv = kv_dtype(spec.model.dtype, kv_cache_dtype)
    per_token = kv_bytes_per_token_per_gpu(arch, kv, tp, pp)

    def fits(settings: LoraSettings) -> bool:
        left = round_down(room - buffer_gib(arch, settings, tp, pp))
        return kv_tokens_in(left, per_token) >= max_model_len

    buffers = buffer_gib(arch, lora, tp, pp)
    one_sequence = per_token * max_model_len / GIB
    layout = f"TP={tp}" + (f" x PP={pp}" if pp > 1 else "")
    options = []
    fewer = [n for n in range(lora.max_adapters - 1, 0, -1) if fits(replace(lora, max_adapters=n))]
    if fewer:
        options.append(f"{LORA_FIELD}.maxAdapters {fewer[0]} or less")
    lower = [r for r in LORA_RANKS[::-1] if r < lora.max_rank and fits(replace(lora, max_rank=r))]
    if lower:
        options.append(f"{LORA_FIELD}.maxRank {lower[0]} or less (if the adapters' ranks allow)")
    options.append("more GPUs (spec.gpus.count) or a shorter spec.engine.maxModelLen")
    return PlanError(
        LORA_FIELD,
        f"LoRA's buffers for {lora.max_adapters} adapters of rank up to {lora.max_rank} take "
        f"{buffers:.2f} GiB of each GPU, but at {layout} {room:.2f} GiB is left after the "
        f"weights and the runtime reserve, and one {max_model_len:,}-token sequence needs "
        f"{one_sequence:.2f} GiB of KV cache: {room - buffers:.2f} GiB would remain for it. "
        f"Would fit: {'; '.join(options)}",
    )
