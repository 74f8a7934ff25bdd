"""Measure one vLLM engine configuration on a real GPU: KV-cache capacity, batch-1 latency and a
list of (concurrency, prompt, output) points. Runs on the GPU machine, beside the scripts of the
vLLM bundle (`.gpu-bundle/gpu/common.py`, see bench/gpu/README.md); one JSON object per line.

  python3 bench/gpu/measure.py $MODELS/llama-3.1-8b --tag plan-8b --max-num-seqs 256 \
      --points 1x512x128,32x2048x128 --saturate 1024x512x256 --results $OUT/h100.jsonl

Per point CxPxO (C requests of P random prompt tokens and O generated tokens, submitted at once,
greedy, ignore_eos; prefix caching off so no prompt is a cache hit):
  prefill_s   wall time of C fresh prompts with max_tokens=1 (prefill of C x P tokens + one step)
  wall_s      wall time of C other fresh prompts with max_tokens=O
  out_tok_s   C x O / wall_s
  itl_ms      (wall_s - prefill_s) / (O - 1): the decode step at concurrency C
--saturate NxPxO: N requests at once with the engine's own max_num_seqs (sampling at
temperature 0.8, top_p 0.95, as the reference figures of 2026-11-23): out_tok_s, total_tok_s.
--saturate-greedy NxPxO: the same, greedy (the bundle has no FlashInfer, so top-p sampling runs
torch's sort over the vocabulary every step; greedy isolates the engine's own step).
--ttft P,P,...: one request alone with max_tokens=1, per prompt length (median of 3).
--repeat N: every timed run N times, the fastest kept (a per-shape JIT compile lands in one of
them, not in all; the TTFT then takes the median of max(3, N)).
--warm-each: every measurement is first run once untimed, the same shapes and lengths, so a
kernel that JIT-compiles per shape (Triton's, e.g. the MXFP4 MoE step's matmul_ogs) compiles
outside the timed run; each line then carries "warm_each": true.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".gpu-bundle", "gpu"))

from common import emit, engine_args, parser, prompt_maker, sampling, start, timed_generate


def _triples(text: str) -> list[tuple[int, int, int]]:
    out = []
    for item in filter(None, text.split(",")):
        c, p, o = (int(x) for x in item.split("x"))
        out.append((c, p, o))
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--points", default="", help="CxPxO,... (concurrency x prompt x output)")
    p.add_argument("--saturate", default="", help="NxPxO,... throughput runs")
    p.add_argument("--saturate-greedy", default="", help="NxPxO,... throughput runs, greedy")
    p.add_argument("--ttft", default="", help="prompt lengths for batch-1 TTFT")
    p.add_argument("--warm-each", action="store_true", help="run each measurement once untimed")
    p.add_argument("--repeat", type=int, default=1, help="time each run N times, keep the fastest")
    a = p.parse_args()
    kw = engine_args(a)
    if a.dry_run:
        emit({"tag": a.tag, "engine_args": kw, "points": _triples(a.points)})
        return
    llm, info = start(kw)
    base = {
        "tag": a.tag,
        "model": os.path.basename(a.model.rstrip("/")),
        "gpu": info["gpu"],
        "vllm": info["vllm"],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),  # the GPU machine's clock, UTC
        **({"warm_each": True} if a.warm_each else {}),
        **({"repeat": a.repeat} if a.repeat > 1 else {}),
    }
    emit({**base, "kind": "engine", "engine_args": kw, **info}, a.results)
    make = prompt_maker(a.model, a.seed)
    timed_generate(llm, make(4, 256), sampling(kw, 8))  # warm-up
    for length in [int(x) for x in filter(None, a.ttft.split(","))]:
        if a.warm_each:
            timed_generate(llm, make(1, length), sampling(kw, 1, temperature=0))
        times = [
            timed_generate(llm, make(1, length), sampling(kw, 1, temperature=0))[0]
            for _ in range(max(3, a.repeat))
        ]
        emit(
            {
                **base,
                "kind": "ttft",
                "in": length,
                "ttft_ms": round(statistics.median(times) * 1e3, 2),
            },
            a.results,
        )
    for c, lin, lout in _triples(a.points):
        if a.warm_each:
            timed_generate(llm, make(c, lin), sampling(kw, lout, temperature=0))
        prefill = min(
            timed_generate(llm, make(c, lin), sampling(kw, 1, temperature=0))[0]
            for _ in range(a.repeat)
        )
        wall, n = min(
            timed_generate(llm, make(c, lin), sampling(kw, lout, temperature=0))
            for _ in range(a.repeat)
        )
        emit(
            {
                **base,
                "kind": "point",
                "concurrency": c,
                "in": lin,
                "out": lout,
                "prefill_s": round(prefill, 4),
                "wall_s": round(wall, 4),
                "out_tok_s": round(n / wall, 1),
                "itl_ms": round((wall - prefill) / max(1, lout - 1) * 1e3, 3),
            },
            a.results,
        )
    runs = [(t, "top_p") for t in _triples(a.saturate)] + [
        (t, "greedy") for t in _triples(a.saturate_greedy)
    ]
    for (n_req, lin, lout), how in runs:
        extra = {"temperature": 0.8, "top_p": 0.95} if how == "top_p" else {"temperature": 0}
        if a.warm_each:
            timed_generate(llm, make(n_req, lin), sampling(kw, lout, **extra))
        wall, n = min(
            timed_generate(llm, make(n_req, lin), sampling(kw, lout, **extra))
            for _ in range(a.repeat)
        )
        emit(
            {
                **base,
                "kind": "saturate",
                "sampling": how,
                "nreq": n_req,
                "in": lin,
                "out": lout,
                "wall_s": round(wall, 3),
                "out_tok_s": round(n / wall, 1),
                "total_tok_s": round((n + n_req * lin) / wall, 1),
                "max_num_seqs": info["max_num_seqs"],
                "max_num_batched_tokens": info["max_num_batched_tokens"],
            },
            a.results,
        )


if __name__ == "__main__":
    main()
