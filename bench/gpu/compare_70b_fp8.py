"""The planner against vLLM 0.26.0 for Llama-3.1-70B in fp8 on ONE GPU (run.sh phases h200-70b-fp8,
h100-70b-fp8; issue 21). Reads the JSON lines those phases wrote and prints, per measured figure,
what the planner's performance model (planner/performance.py, the constants it ships) and memory
model (planner/memory.py) predict for the same engine arguments, with the error in %.

  .venv/bin/python bench/gpu/compare_70b_fp8.py bench/gpu/h200-2026-11-24-70b-fp8.jsonl [...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.catalog.known_models import lookup_architecture
from llmfleet.planner.memory import fit_on_gpu
from llmfleet.planner.performance import Gpu, pod_model

GPUS = {"NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA H200": "h200-141gb"}
ARCH = lookup_architecture("meta-llama/Llama-3.1-70B-Instruct")


def _pct(pred: float, meas: float) -> str:
    return f"{(pred / meas - 1) * 100:+6.1f} %"


def main(paths: list[str]) -> None:
    assert ARCH is not None
    rows = [
        json.loads(line)
        for p in paths
        for line in Path(p).read_text().splitlines()
        if line.startswith("{")
    ]
    engines = {r["tag"]: r for r in rows if r["kind"] == "engine"}
    out = []
    for r in rows:
        e = engines.get(r["tag"])
        if e is None:
            continue
        prof = DEFAULT_GPU_PROFILES[GPUS[e["gpu"]]]
        args = e["engine_args"]
        quant = args.get("quantization") or "none"
        mnbt = e["max_num_batched_tokens"]
        pod = pod_model(
            ARCH,
            dtype="bfloat16",
            quantization=quant,
            tensor_parallel_size=args.get("tensor_parallel_size", 1),
            gpu=Gpu(prof.hbm_gbps, prof.bf16_tflops, prof.fp8_tflops, prof.interconnect_gbps),
            max_num_batched_tokens=mnbt,
        )
        head = f"{e['gpu']} | vLLM {e['vllm']} | {r.get('date', '?')} | {r['tag']}"
        if r["kind"] == "engine":
            fit = fit_on_gpu(
                ARCH,
                dtype="bfloat16",
                quantization=quant,
                memory_gib=prof.memory_gib,
                gpu_memory_utilization=args["gpu_memory_utilization"],
                max_num_batched_tokens=mnbt,
                tensor_parallel_size=1,
            )
            line = (
                f"KV tokens: vLLM {e['kv_tokens']:,} planner {fit.kv_tokens:,} "
                f"{_pct(fit.kv_tokens, e['kv_tokens'])}; init {e['init_s']} s; "
                f"max_num_seqs {e['max_num_seqs']}, mnbt {mnbt}; GPU {e['gpu_total_gib']} GiB"
            )
        elif r["kind"] == "ttft":
            p = pod.ttft_s(r["in"]) * 1e3
            measured = r["ttft_ms"]
            line = f"TTFT {r['in']:5d} tok: {measured:9.2f} ms, planner {p:9.2f} "
            line += _pct(p, measured)
        elif r["kind"] == "point":
            c, i, o = r["concurrency"], r["in"], r["out"]
            pi = pod.itl_s(c, i, o) * 1e3
            pt = pod.output_tokens_per_s(c, i, o)
            line = (
                f"c{c:<4d}{i}/{o}: ITL {r['itl_ms']:7.3f} ms, "
                f"planner {pi:7.3f} {_pct(pi, r['itl_ms'])}; "
                f"out {r['out_tok_s']:8.1f} tok/s, planner {pt:8.1f} {_pct(pt, r['out_tok_s'])}"
            )
        elif r["kind"] == "saturate":
            c = r["max_num_seqs"]
            pt = pod.output_tokens_per_s(c, r["in"], r["out"])
            line = (
                f"saturate {r['sampling']:6s} {r['nreq']}x{r['in']}/{r['out']} at {c} seqs: "
                f"{r['out_tok_s']:8.1f} out tok/s, planner {pt:8.1f} {_pct(pt, r['out_tok_s'])}"
            )
        else:
            continue
        out.append(f"{head} | {line}")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
