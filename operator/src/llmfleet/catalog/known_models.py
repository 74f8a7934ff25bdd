"""Architecture figures of popular open models, so users can name them without `architecture`.

Figures come from each model's published config.json on the Hugging Face Hub
(num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim or hidden_size /
num_attention_heads, max_position_embeddings; vocab_size and tie_word_embeddings for the models
whose hidden_size is heads x head_dim; intermediate_size (OPT: ffn_dim) for every model, and
hidden_size where it is not heads x head_dim, for the LoRA buffers) and parameter counts from
the model cards or the Hub's safetensors metadata. For multimodal Gemma 3 the text_config
figures are used (with its sliding window and the layers that use it) and the parameter count
includes the vision tower, which vLLM also loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from llmfleet.models.model_spec import ModelArchitecture, ModelSpec

# Instruct/chat variants share the base model's architecture.
_INSTRUCT_SUFFIX = "-instruct"


# Positional on purpose: the entries below read as a table in config.json order.
def _arch(  # noqa: PLR0917
    params_b: float,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    max_pos: int,
    vocab: int | None = None,
    tied: bool = False,
    *,
    inter: int,
    hidden: int | None = None,
    window: int | None = None,
    window_layers: int | None = None,
) -> ModelArchitecture:
    return ModelArchitecture(
        parameters_billions=params_b,
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=max_pos,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        hidden_size=hidden,
        intermediate_size=inter,
        sliding_window=window,
        sliding_window_layers=window_layers,
    )


_LLAMA_3_70B = _arch(70.6, 80, 64, 8, 128, 131072, 128256, inter=28672)

_ENTRIES: dict[str, ModelArchitecture] = {
    # meta-llama: Llama 3.1 / 3.2 / 3.3 config.json (rope-scaled to 128k context).
    "meta-llama/Llama-3.1-8B": _arch(8.03, 32, 32, 8, 128, 131072, 128256, inter=14336),
    "meta-llama/Llama-3.1-70B": _LLAMA_3_70B,
    "meta-llama/Llama-3.1-405B": _arch(405.9, 126, 128, 8, 128, 131072, 128256, inter=53248),
    "meta-llama/Llama-3.2-1B": _arch(1.24, 16, 32, 8, 64, 131072, 128256, tied=True, inter=8192),
    "meta-llama/Llama-3.2-3B": _arch(3.21, 28, 24, 8, 128, 131072, 128256, tied=True, inter=8192),
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA_3_70B,
    # Qwen2.5: the Instruct config.json's 32768 (longer contexts need YaRN rope scaling).
    "Qwen/Qwen2.5-7B": _arch(7.62, 28, 28, 4, 128, 32768, 152064, inter=18944),
    "Qwen/Qwen2.5-32B": _arch(32.8, 64, 40, 8, 128, 32768, 152064, inter=27648),
    "Qwen/Qwen2.5-72B": _arch(72.7, 80, 64, 8, 128, 32768, 152064, inter=29568),
    "mistralai/Mistral-7B-v0.3": _arch(7.25, 32, 32, 8, 128, 32768, 32768, inter=14336),
    # Gemma 3: 5 of every 6 layers attend to a 1024-token window (text_config sliding_window,
    # sliding_window_pattern 6), so layers - layers // 6 of them.
    "google/gemma-3-4b-it": _arch(
        4.3, 34, 8, 4, 256, 131072, inter=10240, hidden=2560, window=1024, window_layers=29
    ),
    "google/gemma-3-12b-it": _arch(
        12.2, 48, 16, 8, 256, 131072, inter=15360, hidden=3840, window=1024, window_layers=40
    ),
    "google/gemma-3-27b-it": _arch(
        27.4, 62, 32, 16, 128, 131072, inter=21504, hidden=5376, window=1024, window_layers=52
    ),
    # OPT: multi-head attention (KV heads = heads), head_dim = hidden_size / heads.
    "facebook/opt-125m": _arch(0.125, 12, 12, 12, 64, 2048, inter=3072),
    "facebook/opt-13b": _arch(12.9, 40, 40, 40, 128, 2048, inter=20480),
    "facebook/opt-66b": _arch(65.7, 64, 72, 72, 128, 2048, inter=36864),
    "facebook/opt-175b": _arch(175.0, 96, 96, 96, 128, 2048, inter=49152),
}

# Keyed by lower-cased id: Hub ids are case-insensitive.
CATALOG: Mapping[str, ModelArchitecture] = MappingProxyType(
    {name.lower(): arch for name, arch in _ENTRIES.items()}
)
CATALOG_NAMES: tuple[str, ...] = tuple(sorted(_ENTRIES, key=str.lower))


def lookup_architecture(name: str) -> ModelArchitecture | None:
    """The catalog entry for a Hub id, ignoring case and an `-Instruct` suffix."""
    key = name.strip().lower()
    if key in CATALOG:
        return CATALOG[key]
    if key.endswith(_INSTRUCT_SUFFIX):
        return CATALOG.get(key.removesuffix(_INSTRUCT_SUFFIX))
    return None


def resolve_architecture(model: ModelSpec) -> ModelArchitecture | None:
    """The architecture to size `model` by: its own figures first, then the catalog."""
    return model.architecture or lookup_architecture(model.name)
