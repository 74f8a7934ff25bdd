"""The model directory the lab's stand-in tests start the engine stand-in on: the tiny test
model's config.json (dev/dataplane/tiny_model.py), as far as the stand-in's KV cache reads it,
and no weights (the stand-in loads none)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TINY = {
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "hidden_size": 128,
    "max_position_embeddings": 2048,
    "dtype": "bfloat16",
}


def tiny_model(where: Path, **changes: Any) -> str:
    """`where`, holding the tiny model's config.json with `changes` over it; its path, for
    --model."""
    (where / "config.json").write_text(json.dumps({**TINY, **changes}))
    return str(where)
