"""On the GPU machine (after ../shared/gpu's remote-install.sh and env.sh): how fast vLLM 0.26.0
loads real bytes, by each loading option it offers, against the default (issue 44: every GPU run
so far used dummy weights, so the weight load was never measured).

  python3 bench/gpu/load_probe.py write $MODELS/llama-3.1-8b /tmp/ckpt/llama-3.1-8b
  python3 bench/gpu/load_probe.py time /tmp/ckpt/llama-3.1-8b --out $OUT/load \\
      --strategy default --strategy eager --strategy prefetch

`write` makes a checkpoint of random bf16 weights in the model's config.json's shape (Llama and
Qwen2 layouts: the tensor names vLLM's loader expects), in 5 GB safetensors shards, with the
config-only folder's other files beside them, so the real safetensors loader reads real bytes.
`time` starts `vllm serve` on it once per option, page cache dropped first where the machine lets us
(`/proc/sys/vm/drop_caches`, else POSIX_FADV_DONTNEED on each file; a row says which), then once
more with the page cache warm; each row: vLLM's `Model loading took ... seconds`, and the process
start to /health and to the first streamed token. Options: `default` (vLLM's own: memory-mapped),
`lazy`, `eager`, `prefetch` (`--safetensors-load-strategy`), and `instanttensor` (`--load-format`,
where its package is installed)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from start_probe import serve_once

SHARD_BYTES = 5 * 1024**3
OPTIONS = {
    "default": (),
    "lazy": ("--safetensors-load-strategy", "lazy"),
    "eager": ("--safetensors-load-strategy", "eager"),
    "prefetch": ("--safetensors-load-strategy", "prefetch"),
    "instanttensor": ("--load-format", "instanttensor"),
}


def shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every weight of a Llama- or Qwen2-shaped decoder, by the name vLLM loads it under."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
    )
    d = cfg.get("head_dim") or h // heads
    bias = cfg.get("model_type") == "qwen2"
    out: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (v, h),
        "model.norm.weight": (h,),
    }
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (v, h)
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}"
        out |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (heads * d, h),
            f"{p}.self_attn.k_proj.weight": (kv * d, h),
            f"{p}.self_attn.v_proj.weight": (kv * d, h),
            f"{p}.self_attn.o_proj.weight": (h, heads * d),
            f"{p}.mlp.gate_proj.weight": (i, h),
            f"{p}.mlp.up_proj.weight": (i, h),
            f"{p}.mlp.down_proj.weight": (h, i),
        }
        if bias:
            out |= {
                f"{p}.self_attn.q_proj.bias": (heads * d,),
                f"{p}.self_attn.k_proj.bias": (kv * d,),
                f"{p}.self_attn.v_proj.bias": (kv * d,),
            }
    return out


def write(config_dir: Path, dest: Path) -> dict[str, Any]:
    import torch  # the GPU machine's; not the project's
    from safetensors.torch import save_file

    cfg = json.loads((config_dir / "config.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    for f in config_dir.iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".index.json")):
            shutil.copy(f, dest / f.name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.monotonic()
    weight_map: dict[str, str] = {}
    shard: dict[str, Any] = {}
    size = total = 0
    names: list[str] = []

    def flush() -> None:
        nonlocal shard, size
        if shard:
            name = f"model-{len(names) + 1:05d}.safetensors"
            save_file(shard, str(dest / name), metadata={"format": "pt"})
            names.append(name)
            weight_map.update(dict.fromkeys(shard, name))
            shard, size = {}, 0

    for name, shape in shapes(cfg).items():
        t = (torch.randn(shape, dtype=torch.bfloat16, device=device) * 0.02).cpu()
        if size + t.numel() * 2 > SHARD_BYTES:
            flush()
        shard[name] = t
        size += t.numel() * 2
        total += t.numel() * 2
    flush()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index))
    return {"step": "write", "gib": round(total / 1024**3, 2), "shards": len(names),
            "s": round(time.monotonic() - t0, 1)}  # fmt: skip


def drop_caches(model: Path) -> str:
    """How the checkpoint's pages left the page cache: `drop_caches` (all of it; needs a writable
    /proc/sys), else `fadvise` (POSIX_FADV_DONTNEED on each file: a container may do that to its
    own files, and clean pages go), else "" (they stayed)."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        pass
    try:
        for f in sorted(model.iterdir()):
            if f.is_file():
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
        return "fadvise"
    except OSError:
        return ""


LOAD = re.compile(r"Model loading took ([\d.]+) GiB and ([\d.]+) seconds")


def time_options(model: str, out: Path, options: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/load-probe-cache")  # one compile cache: the load is what differs
    for option in options:
        for page_cache in ("dropped", "warm"):
            dropped = drop_caches(Path(model)) if page_cache == "dropped" else ""
            log = out / f"{option}-{page_cache}.log"
            row: dict[str, Any] = {"step": "serve", "option": option, "page_cache": page_cache,
                   "dropped": dropped}  # fmt: skip
            row |= serve_once(model, cache, log, {}, load_args=OPTIONS[option])
            found = LOAD.search(log.read_text(errors="replace"))
            if found:
                row |= {"weights_gib": float(found.group(1)), "load_s": float(found.group(2))}
            print(json.dumps(row), flush=True)
            with (out / "load.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            if "exited" in row:
                break  # the option is not available here: its log says why


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("config_dir", type=Path)
    w.add_argument("dest", type=Path)
    t = sub.add_parser("time")
    t.add_argument("model")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--strategy", action="append", choices=sorted(OPTIONS), default=[])
    args = p.parse_args()
    if args.command == "write":
        print(json.dumps(write(args.config_dir, args.dest)), flush=True)
    else:
        time_options(args.model, args.out, args.strategy or ["default"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
