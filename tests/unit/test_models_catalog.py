"""The built-in catalog lets users name popular models without architecture figures."""

from __future__ import annotations

import pytest

from llmfleet.catalog.known_models import lookup_architecture, resolve_architecture
from llmfleet.models import ModelArchitecture, ModelSpec


@pytest.mark.parametrize(
    ("name", "layers", "kv_heads", "head_dim", "context"),
    [
        pytest.param("meta-llama/Llama-3.1-70B-Instruct", 80, 8, 128, 131072, id="instruct"),
        pytest.param("META-LLAMA/llama-3.1-8b", 32, 8, 128, 131072, id="case-insensitive"),
        pytest.param("meta-llama/Llama-3.1-405B-Instruct", 126, 8, 128, 131072, id="405b"),
        pytest.param("meta-llama/Llama-3.3-70B-Instruct", 80, 8, 128, 131072, id="3.3"),
        pytest.param("Qwen/Qwen2.5-7B-Instruct", 28, 4, 128, 32768, id="qwen"),
        pytest.param("google/gemma-3-4b-it", 34, 4, 256, 131072, id="gemma-head-dim-256"),
        pytest.param("facebook/opt-125m", 12, 12, 64, 2048, id="opt-multi-head"),
    ],
)
def test_known_names_resolve_to_published_config(
    name: str, layers: int, kv_heads: int, head_dim: int, context: int
) -> None:
    arch = lookup_architecture(name)

    assert arch is not None
    assert (arch.num_layers, arch.num_key_value_heads, arch.head_dim) == (
        layers,
        kv_heads,
        head_dim,
    )
    assert arch.max_position_embeddings == context


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("meta-llama/Llama-3.1-70B-Chat", id="unknown-variant"),
        pytest.param("/models/my-finetune", id="local-path"),
        pytest.param("Llama-3.1-8B", id="missing-organisation"),
    ],
)
def test_unknown_names_are_not_guessed(name: str) -> None:
    assert lookup_architecture(name) is None


def test_spec_architecture_wins_over_catalog() -> None:
    own = ModelArchitecture(
        parameters_billions=1,
        num_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=8,
        max_position_embeddings=64,
    )
    model = ModelSpec(name="meta-llama/Llama-3.1-8B", architecture=own)

    assert resolve_architecture(model) == own
