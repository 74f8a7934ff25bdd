"""gpt-oss's decoder layers (GptOssForCausalLM, vllm/model_executor/models/gpt_oss.py in vLLM
0.32): grouped-query attention with biases and one attention-sink logit per head, sliding-window
(128) and full-attention layers alternating, and a mixture of experts whose gate/up and down
projections carry biases, behind a router with a bias."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmfleet.catalog.hfconfig_layers import (
    Layers,
    Linear,
    gqa_attention,
    gqa_linears,
    positive_int,
)

# Gate/up (two outputs per expert unit) and down projections.
_EXPERT_MATRICES = 3
_FP32 = 4


def _rope_cache_bytes(config: Mapping[str, Any], head_dim: int) -> int:
    """OAIAttention asks get_rope for float32, so YaRN's cos/sin cache (original positions x
    factor, head_dim wide) stays fp32: 32 MiB for gpt-oss's 4096 x 32 positions."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    original = scaling.get("original_max_position_embeddings")
    factor = scaling.get("factor")
    if not isinstance(original, int) or not isinstance(factor, int | float):
        return 0
    return int(original * factor) * head_dim * _FP32


def gpt_oss_layers(config: Mapping[str, Any]) -> Layers:
    hidden = positive_int(config, "hidden_size")
    count = positive_int(config, "num_hidden_layers")
    width = positive_int(config, "intermediate_size")
    experts = positive_int(config, "num_local_experts")
    heads = positive_int(config, "num_attention_heads")
    attention, head_dim = gqa_attention(config, bias=True, qk_norm=False)
    # The output projection's bias and the sinks (one logit per head, no KV cache).
    attention += hidden + heads
    routed = experts * _EXPERT_MATRICES * hidden * width
    expert_biases = experts * (2 * width + hidden)
    router = hidden * experts + experts
    per_layer = attention + 2 * hidden + router + routed + expert_biases
    linears: list[Linear] = []
    for i in range(count):
        prefix = f"model.layers.{i}"
        linears += gqa_linears(prefix, config, head_dim)
        linears += [
            Linear(f"{prefix}.mlp.router", hidden, experts),
            Linear(f"{prefix}.mlp.experts.gate_up_proj", hidden, 2 * width, experts),
            Linear(f"{prefix}.mlp.experts.down_proj", width, hidden, experts),
        ]
    return Layers(
        parameters=count * per_layer,
        head_dim=head_dim,
        sliding_window=positive_int(config, "sliding_window"),
        # vLLM gives even-numbered layers the window whatever layer_types says
        # (OAIAttention: layer_idx % 2 == 0).
        sliding_layers=math.ceil(count / 2),
        routed_expert_parameters=count * routed,
        experts=experts,
        experts_per_token=positive_int(
            config, "num_experts_per_tok", config.get("experts_per_token")
        ),
        expert_intermediate_size=width,
        expert_layers=count,
        expert_biases=True,
        buffer_bytes=_rope_cache_bytes(config, head_dim),
        linears=tuple(linears),
    )
