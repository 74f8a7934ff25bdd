"""The planner at its edges, from the 2 x H200 runs of 2026-11-25 (bench/gpu/run.sh phases edges,
tp2 and spread; bench/gpu/h200x2-2026-11-25.jsonl, logs in bench/gpu/logs/):

* KV cache on tight fits: a model whose MLP is 5.4 x its hidden size (Qwen2.5-32B's shape at
  utilization 0.6, about 20 GiB of KV cache) and Llama-3.1-70B in fp8 at an H100's 0.95 budget
  (0.538 of an H200, 3.7 GiB of KV cache) compiling afresh, as a new pod does;
* tensor parallelism: Llama-3.1-8B at TP 2, its KV cache and its decode step against the
  planner's all-reduce model;
* hybrid attention: Gemma 3 27B's text model (52 of 62 layers sliding) at a 32k context and
  Gemma 2 9B (every other layer sliding) at 8k: vLLM's "GPU KV cache size" and "Maximum
  concurrency" (bench/gpu/h200x2-2026-11-25-hybrid.jsonl, from the models' config.json);
* measurement method: one engine runs the same saturation run (1,024 requests of 512 + 256
  tokens, 512 sequences) four times, top-p 0.95 on one GPU and greedy on the other: how much the
  first (cold) run and the sampler change the figure.

gpu_model.py calls `edge_figures` with its KV comparison of every engine; `edge_report` prints
the rows.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path
from typing import Any

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.catalog.hfconfig import architecture_from_config
from llmfleet.catalog.hub import load_config_file
from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.planner.memory import fit_on_gpu
from llmfleet.planner.performance import Gpu, pod_model

DATA = Path(__file__).resolve().parent / "gpu"
RUN = DATA / "h200x2-2026-11-25.jsonl"
HYBRID_RUN = DATA / "h200x2-2026-11-25-hybrid.jsonl"
WIDE_MLP_TAG = "qwen32b-u0.6"
TP2_TAG = "tp2-8b"


def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RUN.read_text().splitlines() if line.startswith("{")]


def _saturation(tag: str) -> list[float]:
    return [r["out_tok_s"] for r in _records() if r["tag"] == tag and r["kind"] == "saturate"]


def sampling_figures() -> dict[str, float]:
    top_p, greedy = _saturation("spread-top-p"), _saturation("spread-greedy")
    warm_top_p, warm_greedy = top_p[1:], greedy[1:]
    spread = max(
        (max(runs) - min(runs)) / statistics.mean(runs) * 100 for runs in (warm_top_p, warm_greedy)
    )
    return {
        "gpu_top_p_cold_run_slowdown_pct": (1 - top_p[0] / statistics.mean(warm_top_p)) * 100,
        "gpu_greedy_cold_run_slowdown_pct": (1 - greedy[0] / statistics.mean(warm_greedy)) * 100,
        "gpu_top_p_cost_pct": (1 - statistics.mean(warm_top_p) / statistics.mean(warm_greedy))
        * 100,
        "gpu_saturate_warm_spread_pct": spread,
    }


def tp2_points() -> list[dict[str, Any]]:
    """Llama-3.1-8B at TP 2 on 2 x H200: measured decode steps against the planner's."""
    arch = lookup_architecture("meta-llama/Llama-3.1-8B")
    assert arch is not None
    profile = DEFAULT_GPU_PROFILES["h200-141gb"]
    assert profile.hbm_gbps
    assert profile.bf16_tflops
    assert profile.interconnect_gbps
    gpu = Gpu(profile.hbm_gbps, profile.bf16_tflops, profile.fp8_tflops, profile.interconnect_gbps)
    pod = pod_model(
        arch,
        dtype="bfloat16",
        quantization="none",
        tensor_parallel_size=2,
        gpu=gpu,
        max_num_batched_tokens=16384,
    )
    rows = []
    for r in _records():
        if r["tag"] == TP2_TAG and r["kind"] == "point":
            c, p, o = r["concurrency"], r["in"], r["out"]
            predicted = pod.itl_s(c, p, o) * 1e3
            rows.append(
                {
                    "point": f"H200 TP2 8B c{c} {p}/{o} itl_ms",
                    "measured": r["itl_ms"],
                    "predicted": round(predicted, 3),
                    "error_pct": round((predicted / r["itl_ms"] - 1) * 100, 1),
                }
            )
    return rows


def _logged(tag: str, pattern: str) -> float:
    text = gzip.decompress((DATA / "logs" / f"{tag}.log.gz").read_bytes()).decode()
    found = re.search(pattern, text)
    assert found, f"{tag}: no {pattern!r} in its log"
    return float(found.group(1).replace(",", ""))


def hybrid_rows() -> list[dict[str, Any]]:
    """Each sliding-window engine: vLLM's logged KV tokens and concurrency against the plan's,
    the model sized from its config.json as the operator does."""
    rows = []
    for line in HYBRID_RUN.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") != "engine":
            continue
        args = r["engine_args"]
        config = load_config_file(DATA / "models" / r["model"] / "config.json")
        profile = DEFAULT_GPU_PROFILES["h200-141gb"]
        fit = fit_on_gpu(
            architecture_from_config(config),
            dtype="bfloat16",
            quantization="none",
            memory_gib=profile.memory_gib,
            cuda_gib=profile.cuda_gib,
            gpu_memory_utilization=args["gpu_memory_utilization"],
            max_num_batched_tokens=r["max_num_batched_tokens"],
            tensor_parallel_size=1,
            max_model_len=args["max_model_len"],
        )
        tokens = _logged(r["tag"], r"GPU KV cache size: ([\d,]+) tokens")
        concurrency = _logged(
            r["tag"], r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"
        )
        rows.append(
            {
                "tag": r["tag"],
                "vllm_tokens": int(tokens),
                "planner_tokens": fit.kv_tokens,
                "tokens_error_pct": round((fit.kv_tokens / tokens - 1) * 100, 2),
                "vllm_concurrency": concurrency,
                "planner_sequences": fit.sequences(args["max_model_len"]),
            }
        )
    return rows


def edge_figures(kv: list[dict[str, Any]]) -> dict[str, float]:
    by_tag = {k["tag"]: k for k in kv}
    tp2 = tp2_points()
    return {
        "gpu_kv_wide_mlp_error_pct": abs(by_tag[WIDE_MLP_TAG]["error_pct"]),
        "gpu_kv_tp2_error_pct": abs(by_tag[TP2_TAG]["error_pct"]),
        "gpu_tp2_itl_error_max_pct": max(abs(r["error_pct"]) for r in tp2),
        "gpu_kv_hybrid_error_max_pct": max(abs(r["tokens_error_pct"]) for r in hybrid_rows()),
        **sampling_figures(),
    }


def edge_report() -> dict[str, Any]:
    return {
        "tp2_itl": tp2_points(),
        "hybrid": hybrid_rows(),
        "saturation_out_tok_s": {
            "top_p": _saturation("spread-top-p"),
            "greedy": _saturation("spread-greedy"),
        },
    }
