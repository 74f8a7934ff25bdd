"""The decoder layers of each model family config.json describes: their parameters (summed from
the weight shapes vLLM allocates) and the figures the planner sizes the KV cache and the experts
by. hfconfig.py adds the embeddings and dispatches on the architecture."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Gated MLP: gate, up and down projections.
_MLP_MATRICES = 3


class ModelConfigError(ValueError):
    """config.json describes a model the planner does not model, or is not a config.json."""


def positive_int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"config.json has no positive integer {key} (found {value!r})")
    return value


@dataclass(frozen=True)
class Linear:
    """A linear layer's weight matrix as vLLM names the module (model.layers.0.self_attn.q_proj):
    what a quantized checkpoint stores packed, with its scales, unless its config ignores it.
    A mixture of experts' routed experts are one entry per matrix kind, `copies` of it."""

    name: str
    inputs: int
    outputs: int
    copies: int = 1

    @property
    def parameters(self) -> int:
        return self.inputs * self.outputs * self.copies


def _mlp(prefix: str, hidden: int, width: int, copies: int = 1) -> list[Linear]:
    """A gated MLP's gate, up and down projections."""
    return [
        Linear(f"{prefix}.gate_proj", hidden, width, copies),
        Linear(f"{prefix}.up_proj", hidden, width, copies),
        Linear(f"{prefix}.down_proj", width, hidden, copies),
    ]


def gqa_linears(prefix: str, config: Mapping[str, Any], head_dim: int) -> list[Linear]:
    hidden = positive_int(config, "hidden_size")
    heads = positive_int(config, "num_attention_heads")
    kv_heads = positive_int(config, "num_key_value_heads", heads)
    return [
        Linear(f"{prefix}.self_attn.q_proj", hidden, heads * head_dim),
        Linear(f"{prefix}.self_attn.k_proj", hidden, kv_heads * head_dim),
        Linear(f"{prefix}.self_attn.v_proj", hidden, kv_heads * head_dim),
        Linear(f"{prefix}.self_attn.o_proj", heads * head_dim, hidden),
    ]


@dataclass(frozen=True)
class Layers:
    parameters: int  # every decoder layer, without the embeddings
    head_dim: int
    tied_by_default: bool = False
    sliding_window: int | None = None
    sliding_layers: int = 0
    routed_expert_parameters: int = 0  # of `parameters`, summed over the layers
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int | None = None
    expert_layers: int = 0  # decoder layers with routed experts
    expert_biases: bool = False  # each routed expert's projections carry biases (gpt-oss)
    # Buffers vLLM allocates with the weights on every GPU, beyond `parameters`.
    buffer_bytes: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # The linear layers among `parameters`; the rest (norms, biases, routers) stay 16-bit in
    # every quantized format.
    linears: tuple[Linear, ...] = ()


def gqa_attention(config: Mapping[str, Any], *, bias: bool, qk_norm: bool) -> tuple[int, int]:
    """Grouped-query attention's projections (and biases, query/key norms): parameters, head
    dimension."""
    hidden = positive_int(config, "hidden_size")
    heads = positive_int(config, "num_attention_heads")
    kv_heads = positive_int(config, "num_key_value_heads", heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    parameters = hidden * head_dim * (2 * heads + 2 * kv_heads)
    if bias:
        parameters += head_dim * (heads + 2 * kv_heads)
    if qk_norm:
        parameters += 2 * head_dim
    return parameters, head_dim


def _experts(hidden: int, experts: int, width: int) -> int:
    """`experts` gated MLPs of `width`; the router (hidden x experts) is counted by the caller."""
    return experts * _MLP_MATRICES * hidden * width


def llama_layers(name: str, config: Mapping[str, Any]) -> Layers:
    """Llama, Mistral, Qwen2/3 and their mixtures of experts (Mixtral, Qwen2/3-MoE)."""
    hidden = positive_int(config, "hidden_size")
    count = positive_int(config, "num_hidden_layers")
    inter = positive_int(config, "intermediate_size")
    bias = bool(config.get("attention_bias")) or name.startswith("Qwen2")
    attention, head_dim = gqa_attention(config, bias=bias, qk_norm=name.startswith("Qwen3"))
    dense_mlp = _MLP_MATRICES * hidden * inter
    experts = k = width = per_moe_layer = shared = 0
    moe = set[int]()
    if name == "MixtralForCausalLM":
        experts, width, moe = positive_int(config, "num_local_experts"), inter, set(range(count))
    elif name.endswith("MoeForCausalLM") and config.get("num_experts"):
        experts = positive_int(config, "num_experts")
        width = positive_int(config, "moe_intermediate_size")
        skipped = set(config.get("mlp_only_layers") or [])
        step = int(config.get("decoder_sparse_step") or 1)
        moe = {i for i in range(count) if i not in skipped and (i + 1) % step == 0}
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        if shared:
            # Qwen2-MoE's shared expert and its sigmoid gate (hidden -> 1) run for every token.
            per_moe_layer = _MLP_MATRICES * hidden * shared + hidden
    moe_layers = len(moe)
    mlp = "block_sparse_moe" if name == "MixtralForCausalLM" else "mlp"
    linears: list[Linear] = []
    for i in range(count):
        prefix = f"model.layers.{i}"
        linears += gqa_linears(prefix, config, head_dim)
        if i not in moe:
            linears += _mlp(f"{prefix}.mlp", hidden, inter)
            continue
        linears += _mlp(f"{prefix}.{mlp}.experts", hidden, width, experts)
        if shared:
            linears += _mlp(f"{prefix}.mlp.shared_expert", hidden, shared)
    if experts:
        k = positive_int(config, "num_experts_per_tok")
        per_moe_layer += _experts(hidden, experts, width) + hidden * experts
    norms = 2 * hidden
    parameters = count * (attention + norms) + moe_layers * per_moe_layer
    parameters += (count - moe_layers) * dense_mlp
    sliding = None
    if name in {"MistralForCausalLM", "MixtralForCausalLM"} and config.get("sliding_window"):
        sliding = positive_int(config, "sliding_window")
    return Layers(
        parameters=parameters,
        head_dim=head_dim,
        sliding_window=sliding,
        sliding_layers=count if sliding else 0,
        routed_expert_parameters=moe_layers * _experts(hidden, experts, width),
        experts=experts,
        experts_per_token=k,
        expert_intermediate_size=width or None,
        linears=tuple(linears),
    )


def _gemma_sliding_layers(name: str, config: Mapping[str, Any], count: int) -> int:
    types = config.get("layer_types")
    if isinstance(types, list) and len(types) == count:
        return sum(1 for kind in types if kind == "sliding_attention")
    if name == "Gemma2ForCausalLM":
        # Gemma 2 alternates, starting with a sliding-window layer.
        return math.ceil(count / 2)
    # Gemma 3: every sliding_window_pattern-th layer is global, the others local.
    pattern = positive_int(config, "sliding_window_pattern", 6)
    return count - count // pattern


def gemma_layers(name: str, config: Mapping[str, Any]) -> Layers:
    """Gemma 2 and 3: local (sliding-window) and global attention layers interleaved, four norms
    per layer, query/key norms in Gemma 3, tied embeddings."""
    hidden = positive_int(config, "hidden_size")
    count = positive_int(config, "num_hidden_layers")
    inter = positive_int(config, "intermediate_size")
    attention, head_dim = gqa_attention(config, bias=False, qk_norm=name.startswith("Gemma3"))
    per_layer = attention + _MLP_MATRICES * hidden * inter + 4 * hidden
    linears: list[Linear] = []
    for i in range(count):
        linears += gqa_linears(f"model.layers.{i}", config, head_dim)
        linears += _mlp(f"model.layers.{i}.mlp", hidden, inter)
    return Layers(
        parameters=count * per_layer,
        head_dim=head_dim,
        tied_by_default=True,
        sliding_window=positive_int(config, "sliding_window"),
        sliding_layers=_gemma_sliding_layers(name, config, count),
        linears=tuple(linears),
    )


def _mla_attention(config: Mapping[str, Any], hidden: int, heads: int) -> int:
    """Multi-latent attention: queries through an optional low-rank projection, keys and values
    through the kv_lora_rank latent plus a shared rotary key."""
    nope = positive_int(config, "qk_nope_head_dim")
    rope = positive_int(config, "qk_rope_head_dim")
    value = positive_int(config, "v_head_dim")
    kv_rank = positive_int(config, "kv_lora_rank")
    q_rank = int(config.get("q_lora_rank") or 0)
    if q_rank:
        queries = hidden * q_rank + q_rank + q_rank * heads * (nope + rope)
    else:
        queries = hidden * heads * (nope + rope)
    latent = hidden * (kv_rank + rope) + kv_rank
    return queries + latent + kv_rank * heads * (nope + value) + heads * value * hidden


def _mla_linears(prefix: str, config: Mapping[str, Any], hidden: int, heads: int) -> list[Linear]:
    nope = positive_int(config, "qk_nope_head_dim")
    rope = positive_int(config, "qk_rope_head_dim")
    value = positive_int(config, "v_head_dim")
    kv_rank = positive_int(config, "kv_lora_rank")
    q_rank = int(config.get("q_lora_rank") or 0)
    attention = f"{prefix}.self_attn"
    if q_rank:
        queries = [
            Linear(f"{attention}.q_a_proj", hidden, q_rank),
            Linear(f"{attention}.q_b_proj", q_rank, heads * (nope + rope)),
        ]
    else:
        queries = [Linear(f"{attention}.q_proj", hidden, heads * (nope + rope))]
    return [
        *queries,
        Linear(f"{attention}.kv_a_proj_with_mqa", hidden, kv_rank + rope),
        Linear(f"{attention}.kv_b_proj", kv_rank, heads * (nope + value)),
        Linear(f"{attention}.o_proj", heads * value, hidden),
    ]


def deepseek_layers(config: Mapping[str, Any]) -> Layers:
    """DeepSeek-V2/V3 (and Kimi K2): multi-latent attention; the first first_k_dense_replace
    layers dense, the rest n_routed_experts routed plus n_shared_experts shared experts. The
    multi-token-prediction layer (num_nextn_predict_layers) is not loaded without speculative
    decoding, so it is not counted."""
    hidden = positive_int(config, "hidden_size")
    heads = positive_int(config, "num_attention_heads")
    count = positive_int(config, "num_hidden_layers")
    experts = positive_int(config, "n_routed_experts")
    width = positive_int(config, "moe_intermediate_size")
    first_dense = int(config.get("first_k_dense_replace") or 0)
    frequency = int(config.get("moe_layer_freq") or 1)
    moe = {i for i in range(first_dense, count) if i % frequency == 0}
    moe_layers = len(moe)
    routed = _experts(hidden, experts, width)
    shared_count = int(config.get("n_shared_experts") or 0)
    shared = _experts(hidden, shared_count, width)
    inter = positive_int(config, "intermediate_size")
    linears: list[Linear] = []
    for i in range(count):
        prefix = f"model.layers.{i}"
        linears += _mla_linears(prefix, config, hidden, heads)
        if i not in moe:
            linears += _mlp(f"{prefix}.mlp", hidden, inter)
            continue
        linears += _mlp(f"{prefix}.mlp.experts", hidden, width, experts)
        if shared_count:
            # vLLM runs the shared experts as one MLP of their summed width, as stored.
            linears += _mlp(f"{prefix}.mlp.shared_experts", hidden, shared_count * width)
    router = hidden * experts
    if config.get("topk_method") == "noaux_tc":
        router += experts  # the routing bias (e_score_correction_bias)
    dense = _MLP_MATRICES * hidden * inter
    attention = _mla_attention(config, hidden, heads) + 2 * hidden
    parameters = count * attention + moe_layers * (routed + shared + router)
    parameters += (count - moe_layers) * dense
    return Layers(
        parameters=parameters,
        head_dim=hidden // heads,
        routed_expert_parameters=moe_layers * routed,
        experts=experts,
        experts_per_token=positive_int(config, "num_experts_per_tok"),
        expert_intermediate_size=width,
        kv_lora_rank=positive_int(config, "kv_lora_rank"),
        qk_rope_head_dim=positive_int(config, "qk_rope_head_dim"),
        linears=tuple(linears),
    )


def siglip_parameters(config: Mapping[str, Any], text_hidden: int) -> int:
    """Gemma 3's SigLIP vision tower and its projection into the language model."""
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        raise ModelConfigError("config.json has no vision_config for the vision tower")
    hidden = positive_int(vision, "hidden_size")
    inter = positive_int(vision, "intermediate_size")
    patch = positive_int(vision, "patch_size")
    patches = (positive_int(vision, "image_size") // patch) ** 2
    channels = positive_int(vision, "num_channels", 3)
    # Attention projections with biases, a two-matrix MLP with biases, two LayerNorms.
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + inter + hidden + 4 * hidden
    embeddings = channels * patch * patch * hidden + hidden + patches * hidden
    projector = hidden * text_hidden + hidden
    layers = positive_int(vision, "num_hidden_layers")
    return layers * per_layer + embeddings + 2 * hidden + projector
