"""The stand-in's reading of vLLM's command line, and the KV cache vLLM's CPU build allocates.

KV cache, as vLLM 0.32 computes it on the CPU (platforms/cpu.py, v1/worker/cpu_worker.py,
v1/core/kv_cache_utils.py):

- bytes: VLLM_CPU_KVCACHE_SPACE (whole GiB; it wins over `--kv-cache-memory-bytes`, and a value
  that is not an integer fails the start);
- one block holds `block_size` tokens of every layer, keys and values:
  `layers x 2 x block_size x kv_heads x head_dim x dtype bytes`; `--block-size`, else 128 on CPU;
- `num_gpu_blocks = bytes // block bytes`, unless `--num-gpu-blocks-override`;
- a request of `max_model_len` needs `ceil(max_model_len / block_size)` blocks; that ratio is
  `kv_cache_max_concurrency`, and `kv_cache_size_tokens = int(concurrency x max_model_len)`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
CPU_BLOCK_SIZE = 128  # vLLM's CPU platform default when --block-size is not given
CPU_MAX_NUM_SEQS = 128  # vLLM's CPU default for the OpenAI server
GPU_MEMORY_UTILIZATION = 0.92  # vLLM's CacheConfig default
# Without VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes vLLM sizes the cache from the host's
# free memory, which a stand-in cannot reproduce; the node runner always sets the variable.
UNSET_KV_BYTES = 4 * GIB
DTYPE_BYTES = {
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float32": 4,
    "float": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}


class StartupError(Exception):
    """vLLM would not start with this command line or model: the process exits 1."""


def human_int(text: str) -> int:
    """vLLM's human-readable integers: 512, 1k (1000), 1K (1024), 2G."""
    if text and text[-1] in _SUFFIX:
        return int(float(text[:-1]) * _SUFFIX[text[-1]])
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localcluster.standin", allow_abbrev=False, add_help=False)
    p.add_argument("--model", default="Qwen/Qwen3-0.6B")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-model-len", type=human_int)
    p.add_argument("--block-size", type=int)
    p.add_argument("--num-gpu-blocks-override", type=int)
    p.add_argument("--kv-cache-memory-bytes", type=human_int)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--gpu-memory-utilization", type=float, default=GPU_MEMORY_UTILIZATION)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--api-key", action="append")
    p.add_argument("--shutdown-timeout", type=float, default=0.0)
    p.add_argument("--enable-sleep-mode", action="store_true")
    p.add_argument("--middleware", action="append", default=[])
    return p


@dataclass(frozen=True)
class EngineConfig:
    model: str
    served_names: tuple[str, ...]
    host: str
    port: int
    max_num_seqs: int
    max_model_len: int
    block_size: int
    user_specified_block_size: bool
    num_gpu_blocks: int
    num_gpu_blocks_override: int | None
    kv_cache_memory_bytes: int
    cache_dtype: str
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    api_keys: tuple[str, ...]
    shutdown_timeout: float
    # VLLM_SERVER_DEV_MODE=1 opens /sleep, /wake_up and /is_sleeping; --enable-sleep-mode lets
    # the engine sleep (vLLM's executor refuses otherwise).
    dev_mode: bool = False
    enable_sleep_mode: bool = False
    # --middleware: import paths of ASGI middlewares in front of every route (asgi.py).
    middleware: tuple[str, ...] = ()

    @property
    def model_name(self) -> str:
        """The `model_name` label of vLLM's metrics: the first served name."""
        return self.served_names[0]

    @property
    def blocks_per_request(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    @property
    def kv_cache_max_concurrency(self) -> float:
        return self.num_gpu_blocks / self.blocks_per_request

    @property
    def kv_cache_size_tokens(self) -> int:
        return int(self.kv_cache_max_concurrency * self.max_model_len)


def read_model_config(model: str) -> dict[str, Any]:
    path = Path(model) / "config.json"
    try:
        config: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise StartupError(
            f"Invalid repository ID or local directory specified: {model!r} "
            f"(the stand-in reads local model directories only: {e})"
        ) from e
    return config


def model_dtype(config: Mapping[str, Any], dtype: str) -> str:
    if dtype != "auto":
        return dtype
    return str(config.get("dtype") or config.get("torch_dtype") or "bfloat16")


def block_bytes(config: Mapping[str, Any], block_size: int, dtype: str, tp: int) -> int:
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    if dtype not in DTYPE_BYTES:
        raise StartupError(f"Unknown dtype {dtype!r}")
    return layers * 2 * block_size * max(1, kv_heads // tp) * head_dim * DTYPE_BYTES[dtype]


def kv_cache_bytes(env: Mapping[str, str], flag: int | None) -> int:
    space = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if space != "":
        try:
            return int(space) * GIB
        except ValueError as e:
            raise StartupError(f"VLLM_CPU_KVCACHE_SPACE={space!r}: {e}") from e
    return flag if flag is not None else UNSET_KV_BYTES


def _flag(value: str, name: str) -> bool:
    """vLLM's reading of a 0/1 variable: bool(int(value))."""
    try:
        return bool(int(value))
    except ValueError as e:
        raise StartupError(f"{name}={value!r}: {e}") from e


def engine_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> EngineConfig:
    """The engine vLLM would start with `argv` (`vllm serve`'s arguments: the model, then its
    flags; or the OpenAI server module's, with --model) and `env`."""
    env = os.environ if env is None else env
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv[:1] = ["--model", argv[0]]
    args, _unknown = parser().parse_known_args(argv)
    config = read_model_config(args.model)
    positions = int(config.get("max_position_embeddings") or 2048)
    max_model_len = args.max_model_len or positions
    if max_model_len > positions:
        raise StartupError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={positions} in model's config.json)."
        )
    block_size = args.block_size or CPU_BLOCK_SIZE
    dtype = model_dtype(config, args.dtype)
    cache_dtype = args.kv_cache_dtype
    per_block = block_bytes(
        config,
        block_size,
        dtype if cache_dtype == "auto" else cache_dtype,
        args.tensor_parallel_size,
    )
    kv_bytes = kv_cache_bytes(env, args.kv_cache_memory_bytes)
    override = args.num_gpu_blocks_override
    blocks = override if override is not None else kv_bytes // per_block
    keys = [k for group in args.api_key or () for k in group.split(",") if k]
    if not keys and env.get("VLLM_API_KEY"):
        keys = [env["VLLM_API_KEY"]]
    cfg = EngineConfig(
        model=args.model,
        served_names=tuple(args.served_model_name or [args.model]),
        host=args.host,
        port=args.port,
        max_num_seqs=args.max_num_seqs or CPU_MAX_NUM_SEQS,
        max_model_len=max_model_len,
        block_size=block_size,
        user_specified_block_size=args.block_size is not None,
        num_gpu_blocks=blocks,
        num_gpu_blocks_override=args.num_gpu_blocks_override,
        kv_cache_memory_bytes=kv_bytes,
        cache_dtype=cache_dtype,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enable_prefix_caching=args.enable_prefix_caching,
        api_keys=tuple(keys),
        shutdown_timeout=args.shutdown_timeout,
        dev_mode=_flag(env.get("VLLM_SERVER_DEV_MODE", "0"), "VLLM_SERVER_DEV_MODE"),
        enable_sleep_mode=args.enable_sleep_mode,
        middleware=tuple(args.middleware),
    )
    if cfg.num_gpu_blocks < cfg.blocks_per_request:
        raise StartupError(
            f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"{cfg.blocks_per_request} KV cache blocks are needed, which is larger than the "
            f"available KV cache blocks ({cfg.num_gpu_blocks}). Try increasing "
            "VLLM_CPU_KVCACHE_SPACE or decreasing max_model_len when initializing the engine."
        )
    return cfg


def _mamba_ssm_cache_dtype() -> str:
    """vLLM's CPU platform sets float32 where the CPU has AVX-512 BF16, else keeps `auto`."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "auto"
    return "float32" if "avx512_bf16" in flags else "auto"


def cache_config_labels(cfg: EngineConfig) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels (its value is 1), as vLLM 0.32 writes them."""
    return {
        "_block_size_resolved": "True",
        "block_size": str(cfg.block_size),
        "cache_dtype": cfg.cache_dtype,
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(cfg.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "engine": "0",
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(cfg.kv_cache_max_concurrency),
        "kv_cache_memory_bytes": str(cfg.kv_cache_memory_bytes),
        "kv_cache_size_tokens": str(cfg.kv_cache_size_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": _mamba_ssm_cache_dtype(),
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(cfg.num_gpu_blocks),
        "num_gpu_blocks_override": str(cfg.num_gpu_blocks_override),
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": str(cfg.user_specified_block_size),
    }
