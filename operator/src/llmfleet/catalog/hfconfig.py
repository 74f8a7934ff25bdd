"""A model's architecture figures read from its Hugging Face config.json.

vLLM sizes a model from its config.json; so does the planner when `spec.model.architecture` is
not given and the model is not in the catalog. config.json has no parameter count, so it is
summed from the layer shapes (embeddings, attention projections, MLP or experts, norms), as vLLM
would allocate them. Families (see docs/planner.md, "Model families"): dense Llama-like models,
sliding-window attention (Gemma 2/3, Mistral with sliding_window), mixtures of experts (Mixtral,
Qwen2/Qwen3-MoE, DeepSeek-V2/V3, gpt-oss), multi-latent attention (DeepSeek-V2/V3) and
attention sinks (gpt-oss). Anything else is refused, naming what is not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmfleet.catalog import mxfp4_triton
from llmfleet.catalog.gpt_oss_layers import gpt_oss_layers
from llmfleet.catalog.hfconfig_layers import (
    Layers,
    Linear,
    ModelConfigError,
    deepseek_layers,
    gemma_layers,
    llama_layers,
    positive_int,
    siglip_parameters,
)
from llmfleet.catalog.hfquant import QuantFormat, quant_format
from llmfleet.models.model_spec import ModelArchitecture

__all__ = [
    "MODELLED",
    "CheckpointWeights",
    "ModelConfigError",
    "architecture_from_config",
    "checkpoint_weights",
]

_LLAMA_LIKE = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3MoeForCausalLM",
    }
)
_GEMMA = frozenset({"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"})
_DEEPSEEK = frozenset({"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"})
_GPT_OSS = "GptOssForCausalLM"
MODELLED = tuple(sorted(_LLAMA_LIKE | _GEMMA | _DEEPSEEK | {_GPT_OSS}))

# What the planner cannot size in families it knows of; others get the generic refusal.
_NOT_MODELLED = {
    "Llama4ForConditionalGeneration": "chunked local attention and a vision tower",
    "Llama4ForCausalLM": "chunked local attention",
    "Qwen3_5ForConditionalGeneration": "linear-attention (Gated DeltaNet) layers",
    "Qwen3_5MoeForConditionalGeneration": "linear-attention (Gated DeltaNet) layers",
    "Qwen3NextForCausalLM": "linear-attention (Gated DeltaNet) layers",
    "NemotronHForCausalLM": "Mamba layers",
    "MiniMaxText01ForCausalLM": "linear-attention (lightning attention) layers",
    "DeepseekV32ForCausalLM": "sparse attention and its indexer's KV cache",
}
# Default context when config.json does not say (Llama-2's).
_DEFAULT_MAX_POSITIONS = 4096
# Gemma 3's published config.json leaves these to transformers' Gemma3TextConfig defaults.
_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "max_position_embeddings": 131_072,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window_pattern": 6,
}


def _refuse(name: str, what: str) -> ModelConfigError:
    return ModelConfigError(
        f"{name} models are not modelled ({what}); set spec.model.architecture by hand. "
        f"Modelled: {', '.join(MODELLED)}"
    )


def _name(config: Mapping[str, Any]) -> str:
    architectures = config.get("architectures") or []
    return str(architectures[0] if architectures else config.get("model_type", "unknown"))


def _layers(name: str, config: Mapping[str, Any]) -> Layers:
    if name in _GEMMA:
        return gemma_layers(name, config)
    if name in _DEEPSEEK:
        return deepseek_layers(config)
    if name == _GPT_OSS:
        return gpt_oss_layers(config)
    if config.get("use_sliding_window"):
        # Qwen's sliding window covers only the layers past max_window_layers, as vLLM reads it.
        raise _refuse(name, "use_sliding_window (Qwen's partial sliding-window attention)")
    return llama_layers(name, config)


@dataclass(frozen=True)
class _Model:
    text: Mapping[str, Any]  # the language model's figures
    layers: Layers
    parameters: int  # everything vLLM loads: layers, embeddings, final norm, vision tower
    hidden: int
    vocab: int
    tied: bool


def _model(config: Mapping[str, Any]) -> _Model:
    name = _name(config)
    if name not in MODELLED:
        raise _refuse(name, _NOT_MODELLED.get(name, "an architecture the planner does not know"))
    text = config
    vision = 0
    if name == "Gemma3ForConditionalGeneration":
        # The language model's figures sit under text_config; vLLM also loads the SigLIP tower.
        text = {**_GEMMA3_TEXT_DEFAULTS, **(config.get("text_config") or {})}
        vision = siglip_parameters(config, positive_int(text, "hidden_size"))
    layers = _layers(name, text)
    hidden = positive_int(text, "hidden_size")
    vocab = positive_int(text, "vocab_size")
    tied = bool(text.get("tie_word_embeddings", layers.tied_by_default))
    embeddings = vocab * hidden * (1 if tied else 2)
    parameters = layers.parameters + embeddings + hidden + vision
    return _Model(text, layers, parameters, hidden, vocab, tied)


# Everything a quantized format leaves unquantized is loaded in the 16-bit activation dtype.
_HALF = 2


@dataclass(frozen=True)
class CheckpointWeights:
    """A quantized checkpoint's weights, summed from its layers as the format stores them."""

    format: QuantFormat
    total_bytes: float  # as the checkpoint's safetensors store them
    embedding_matrix_bytes: float  # one vocabulary x hidden matrix, 16-bit
    routed_expert_bytes: float  # of total_bytes: the routed experts
    hidden: int = 0
    expert_width: int = 0  # the routed experts' intermediate size
    experts: int = 0
    expert_layers: int = 0
    expert_biases: bool = False
    buffer_bytes: float = 0.0  # allocated with the weights on every GPU (gpt-oss's rope cache)

    def allocated_bytes(self, tensor_parallel_size: int = 1) -> float:
        """What vLLM allocates over `tensor_parallel_size` GPUs: the stored bytes, with the
        routed experts (and their biases) as the format's backend holds them on each GPU
        (MXFP4: catalog/mxfp4_triton.py), and each GPU's buffers."""
        buffers = tensor_parallel_size * self.buffer_bytes
        if self.format.expert_layout is None or not self.routed_expert_bytes:
            return self.total_bytes + buffers
        stored_biases = (
            self.expert_layers * self.experts * (2 * self.expert_width + self.hidden) * _HALF
            if self.expert_biases
            else 0
        )
        held = self.expert_layers * mxfp4_triton.layer_bytes(
            self.experts,
            self.hidden,
            self.expert_width,
            tensor_parallel_size,
            self.expert_biases,
        )
        return (
            self.total_bytes
            - self.routed_expert_bytes
            - stored_biases
            + tensor_parallel_size * held
            + buffers
        )


def checkpoint_weights(config: Mapping[str, Any]) -> CheckpointWeights | None:
    """The weights of the quantized checkpoint `config` declares (its quantization_config);
    None for a 16-bit one. ModelConfigError names what is not modelled."""
    found = quant_format(config)
    if found is None:
        return None
    model = _model(config)
    linears = list(model.layers.linears)
    if found.lm_head and not model.tied:
        linears.append(Linear("lm_head", model.hidden, model.vocab))
    total = routed = 0.0
    for linear in linears:
        if found.quantizes(linear.name):
            size = found.linear_bytes(linear) * linear.copies
        else:
            size = float(linear.parameters * _HALF)
        total += size
        routed += size if linear.copies > 1 else 0.0
    rest = model.parameters - sum(linear.parameters for linear in linears)
    return CheckpointWeights(
        found,
        total + rest * _HALF,
        float(model.vocab * model.hidden * _HALF),
        routed,
        model.hidden,
        model.layers.expert_intermediate_size or 0,
        model.layers.experts,
        model.layers.expert_layers,
        model.layers.expert_biases,
        float(model.layers.buffer_bytes),
    )


def architecture_from_config(config: Mapping[str, Any]) -> ModelArchitecture:
    """The architecture figures of the model `config` (a parsed config.json) describes, or
    ModelConfigError naming what is not modelled."""
    model = _model(config)
    text, layers, parameters = model.text, model.layers, model.parameters
    heads = positive_int(text, "num_attention_heads")
    hidden, vocab, tied = model.hidden, model.vocab, model.tied
    active = None
    if layers.routed_expert_parameters:
        share = layers.experts_per_token / layers.experts
        active = round((parameters - layers.routed_expert_parameters * (1 - share)) / 1e9, 3)
    count = positive_int(text, "num_hidden_layers")
    return ModelArchitecture(
        parameters_billions=round(parameters / 1e9, 3),
        num_layers=count,
        num_attention_heads=heads,
        num_key_value_heads=positive_int(text, "num_key_value_heads", heads),
        head_dim=layers.head_dim,
        max_position_embeddings=positive_int(
            text, "max_position_embeddings", _DEFAULT_MAX_POSITIONS
        ),
        vocab_size=vocab,
        tie_word_embeddings=tied,
        hidden_size=None if hidden == heads * layers.head_dim else hidden,
        intermediate_size=positive_int(text, "intermediate_size"),
        sliding_window=layers.sliding_window,
        sliding_window_layers=(
            layers.sliding_layers
            if layers.sliding_window and layers.sliding_layers < count
            else None
        ),
        num_experts=layers.experts or None,
        num_experts_per_token=layers.experts_per_token or None,
        active_parameters_billions=active,
        expert_intermediate_size=layers.expert_intermediate_size,
        kv_lora_rank=layers.kv_lora_rank,
        qk_rope_head_dim=layers.qk_rope_head_dim,
    )
