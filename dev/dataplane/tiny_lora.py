"""Makes tiny LoRA adapters for the tiny test model (tiny_model.py): no model hub is reachable here.

Run with the vLLM virtualenv's python (it needs torch and safetensors):

    $(dev/dataplane/install-vllm.sh) /bin/python dev/dataplane/tiny_lora.py NAME [--rank R]
        [--seed S] [--broken missing-weights|missing-config] [--print-path]

Prints the adapter directory, `${LLMFLEET_CACHE:-~/.cache/llmfleet}/adapters/<NAME>-<VERSION>`,
holding what PEFT writes: `adapter_config.json` and `adapter_model.safetensors`. The adapter is made
once (deterministically from its seed) and reused.

PEFT starts lora_B at zero, which would make an untrained adapter answer exactly as the base does;
here both matrices are random and scaled large enough that greedy decoding differs from the base's,
so a test can tell by the text which weights served a request.

`--broken` writes an adapter vLLM refuses to load: `missing-weights` (a config and no weights) or
`missing-config` (weights and no config), for the tests of a failed load.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_model

VERSION = "v1"
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
BROKEN = ("missing-weights", "missing-config")


def _shapes(config: dict[str, int]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each target module of one layer."""
    hidden = config["hidden_size"]
    head_dim = config["head_dim"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    inter = config["intermediate_size"]
    return {
        "q_proj": (hidden, q),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (q, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def adapter_dir(name: str, rank: int, seed: int, broken: str | None) -> Path:
    tag = f"{name}-r{rank}-s{seed}" + (f"-{broken}" if broken else "")
    return tiny_model.cache_root() / "adapters" / f"{tag}-{VERSION}"


def _build(out: Path, rank: int, seed: int, broken: str | None) -> None:
    import torch
    from safetensors.torch import save_file

    base = tiny_model.ensure()
    config = json.loads((base / "config.json").read_text())
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, (fan_in, fan_out) in _shapes(config).items():
            block = "self_attn" if module in ATTENTION_MODULES else "mlp"
            key = f"base_model.model.model.layers.{layer}.{block}.{module}"
            a = torch.randn(rank, fan_in, generator=generator) / fan_in**0.5
            b = torch.randn(fan_out, rank, generator=generator) / rank**0.5
            tensors[f"{key}.lora_A.weight"] = a.to(torch.bfloat16).contiguous()
            tensors[f"{key}.lora_B.weight"] = b.to(torch.bfloat16).contiguous()
    adapter_config = {
        "base_model_name_or_path": str(base),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "lora_alpha": 4 * rank,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "target_modules": list(TARGET_MODULES),
        "task_type": "CAUSAL_LM",
    }
    if broken != "missing-config":
        (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")
    if broken != "missing-weights":
        save_file(tensors, str(out / "adapter_model.safetensors"))


def ensure(name: str, rank: int = 8, seed: int = 1, broken: str | None = None) -> Path:
    """Make the adapter unless it exists; safe against concurrent callers."""
    target = adapter_dir(name, rank, seed, broken)
    marker = target / ".complete"
    if marker.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _build(tmp, rank, seed, broken)
            (tmp / ".complete").write_text("")
            for f in tmp.iterdir():
                f.chmod(0o644)  # read by engines that run as another user
            tmp.chmod(0o755)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="the adapter's name (part of its directory's)")
    p.add_argument("--rank", type=int, default=8, help="LoRA rank r (default 8)")
    p.add_argument("--seed", type=int, default=1, help="weights' seed (default 1)")
    p.add_argument("--broken", choices=BROKEN, help="write an adapter vLLM refuses")
    p.add_argument("--print-path", action="store_true", help="print the directory, make nothing")
    args = p.parse_args()
    if args.print_path:
        print(adapter_dir(args.name, args.rank, args.seed, args.broken))
    else:
        print(ensure(args.name, args.rank, args.seed, args.broken))
    return 0


if __name__ == "__main__":
    sys.exit(main())
