"""A model's architecture figures read from its Hugging Face config.json.

vLLM sizes a model from its config.json; so does the planner when `spec.model.architecture` is
not given and the model is not in the catalog. config.json has no parameter count, so it is
summed from the layer shapes (embeddings, attention projections, MLP, norms), as vLLM would
allocate them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmfleet.models.model_spec import ModelArchitecture

# Dense decoder-only models laid out as Llama is: gated MLP (gate, up, down), grouped-query
# attention, RMSNorm.
_LLAMA_LIKE = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
    }
)
# Default context when config.json does not say (Llama-2's).
_DEFAULT_MAX_POSITIONS = 4096


class ModelConfigError(ValueError):
    """config.json describes a model the planner does not model, or is not a config.json."""


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"config.json has no positive integer {key} (found {value!r})")
    return value


def architecture_from_config(config: Mapping[str, Any]) -> ModelArchitecture:
    """The architecture figures of the model `config` (a parsed config.json) describes, or
    ModelConfigError naming what is not modelled."""
    architectures = config.get("architectures") or []
    name = architectures[0] if architectures else config.get("model_type", "unknown")
    if name not in _LLAMA_LIKE:
        raise ModelConfigError(
            f"{name} models are not modelled; set spec.model.architecture by hand. Modelled: "
            + ", ".join(sorted(_LLAMA_LIKE))
        )
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    layers = _int(config, "num_hidden_layers")
    inter = _int(config, "intermediate_size")
    vocab = _int(config, "vocab_size")
    tied = bool(config.get("tie_word_embeddings", False))
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    if config.get("attention_bias") or name == "Qwen2ForCausalLM":
        attention += head_dim * (heads + 2 * kv_heads)
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    embeddings = vocab * hidden * (1 if tied else 2)
    parameters = layers * per_layer + embeddings + hidden
    return ModelArchitecture(
        parameters_billions=round(parameters / 1e9, 3),
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=_int(config, "max_position_embeddings", _DEFAULT_MAX_POSITIONS),
        vocab_size=vocab,
        tie_word_embeddings=tied,
        hidden_size=None if hidden == heads * head_dim else hidden,
        intermediate_size=inter,
    )
