"""LoRA adapters: what serving requests through them costs a vLLM engine in tokens/s and TTFT.

Output tokens/s and time to first token with requests spread over adapters, against the base model
alone (issue 30).

Real vLLM CPU engines (bench/router.py's `_engines`: the node runner's environment, model processes
below their API servers' priority) serving the tiny test model, --max-num-seqs 8, two of them:

* `off`: started without --enable-lora, the base model as an engine without LoRA serves it;
* the LoRA engine: --enable-lora --max-loras 8 --max-lora-rank 16 --max-cpu-loras 8, and ADAPTERS
  tiny rank-8 adapters (dev/dataplane/tiny_lora.py, distinct seeds, so each answers its own text)
  loaded at runtime (POST /v1/load_lora_adapter, as the operator loads them). Its arms: `base`
  (every request to the base model) and `1`, `4`, `8` (requests spread evenly over that many
  adapters, request i to adapter i mod N).

Every arm sends the same REQUESTS fixed prompts, closed loop at CONCURRENCY, MAX_TOKENS tokens each
(greedy, ignore_eos), streamed: TTFT is the first text chunk, tokens/s the generated tokens over the
arm's wall time. The machine is shared, so the arms are interleaved: a cycle runs each arm once,
the order rotated each cycle, CYCLES cycles; an arm's figure is the median over its cycles.

Ratios: `lora_throughput_ratio_N` is tokens/s with N adapters ÷ tokens/s of the engine without
LoRA (what LoRA costs in all); `lora_enabled_throughput_ratio` is the LoRA engine's base arm ÷ the
same (what --enable-lora alone costs), so N adapters ÷ base is the one ratio over the other.

    PYTHONPATH=dev:. .venv/bin/python -m bench.lora [--cycles N]
    PYTHONPATH=dev:. .venv/bin/python -m bench.lora --summarize  # from the raw file

Raw runs go to bench/lora_runs.jsonl, the plot to bench/plots/lora.png.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import plotting, rawruns
from bench.router import INSTALL_VLLM, TINY_MODEL, _engines, _quantile, _run_json, _venv

HERE = Path(__file__).resolve().parent
RAW = HERE / "lora_runs.jsonl"
PLOT = HERE / "plots" / "lora.png"
TINY_LORA = TINY_MODEL.parent / "tiny_lora.py"
ADAPTERS = 8
ADAPTER_RANK = 8
ADAPTER_COUNTS = (1, 4, 8)
# "off": the engine without --enable-lora; "base": the LoRA engine, base model only.
ARMS = ("off", "base", *(str(n) for n in ADAPTER_COUNTS))
CYCLES = 10
REQUESTS = 96
CONCURRENCY = 8
MAX_TOKENS = 32
MAX_MODEL_LEN = 512
LORA_ARGS = (
    "--enable-lora",
    "--max-loras",
    str(ADAPTERS),
    "--max-lora-rank",
    "16",
    "--max-cpu-loras",
    str(ADAPTERS),
)
ENGINE_ENV = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}

MAKE_ADAPTERS = """
import sys
sys.path.insert(0, sys.argv[1])
import tiny_lora
n, rank = int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    print(tiny_lora.ensure(f"bench{i}", rank=rank, seed=100 + i))
"""

CLIENT = """
import concurrent.futures as cf, json, sys, time, openai
base, models, n, conc, max_tokens = sys.argv[1], sys.argv[2].split(","), *map(int, sys.argv[3:6])
TOPICS = ("kubernetes", "the weather", "a queue", "tokens", "replicas", "the fox", "paris", "dogs")
c = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=600, max_retries=0)
def one(i):
    prompt = f"Request {i}: tell me about {TOPICS[i % len(TOPICS)]}."
    sent = time.perf_counter()
    first, tokens, text = None, 0, ""
    stream = c.completions.create(model=models[i % len(models)], prompt=prompt,
                                  max_tokens=max_tokens, temperature=0, stream=True,
                                  stream_options={"include_usage": True},
                                  extra_body={"ignore_eos": True})
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            if first is None:
                first = time.perf_counter() - sent
            text += chunk.choices[0].text
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    return {"model": models[i % len(models)], "ttft": first, "tokens": tokens, "text": text}
start = time.perf_counter()
with cf.ThreadPoolExecutor(conc) as ex:
    out = list(ex.map(one, range(n)))
print(json.dumps({"wall": time.perf_counter() - start, "requests": out}))
"""


def _adapter(i: int) -> str:
    return f"bench{i}"


def _post_json(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()


def _models(arm: str) -> list[str]:
    return ["tiny"] if arm in ("off", "base") else [_adapter(i) for i in range(int(arm))]


def _arm(python: Path, url: str, arm: str, requests: int) -> dict[str, Any]:
    got = _run_json(python, CLIENT, url, ",".join(_models(arm)), requests, CONCURRENCY, MAX_TOKENS)
    reqs = got["requests"]
    short = [r for r in reqs if r["tokens"] != MAX_TOKENS or r["ttft"] is None]
    if short:
        raise RuntimeError(f"arm {arm}: {len(short)} requests without {MAX_TOKENS} tokens")
    ttfts = [float(r["ttft"]) for r in reqs]
    return {
        "arm": arm,
        "tokens_per_s": sum(int(r["tokens"]) for r in reqs) / float(got["wall"]),
        "ttft_p50_s": _quantile(ttfts, 0.5),
        "ttft_p99_s": _quantile(ttfts, 0.99),
        "wall_s": got["wall"],
        "requests": [{k: r[k] for k in ("model", "ttft", "tokens")} for r in reqs],
        "texts": {r["model"]: r["text"] for r in reqs},
    }


def _warm_up(python: Path, urls: dict[str, str]) -> None:
    """A short run of every arm's models first: first requests pay one-off costs (allocations, an
    adapter's first move into its slot) that would otherwise land on whichever arm runs first.
    The greedy texts also show that each adapter serves its own weights."""
    for arm in ("off", str(ADAPTERS)):
        got = _arm(python, urls[arm], arm, 2 * ADAPTERS)
    base = _arm(python, urls["base"], "base", 1)["texts"]["tiny"]
    same = [m for m, text in got["texts"].items() if text == base]
    if same or len(set(got["texts"].values())) != ADAPTERS:
        raise RuntimeError(f"adapters answer as the base or as each other: {same or got['texts']}")


def measure(cycles: int, requests: int = REQUESTS) -> list[dict[str, Any]]:
    python = _venv(INSTALL_VLLM) / "bin" / "python"
    model = (
        subprocess.run([str(python), str(TINY_MODEL)], check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    adapters = subprocess.run(
        [str(python), "-c", MAKE_ADAPTERS, str(TINY_LORA.parent), str(ADAPTERS), str(ADAPTER_RANK)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmfleet-bench-lora-") as tmp, ExitStack() as stack:
        off, lora = _engines(
            stack,
            python,
            model,
            2,
            Path(tmp),
            max_model_len=MAX_MODEL_LEN,
            max_num_seqs=CONCURRENCY,
            extra_env=ENGINE_ENV,
            args_by_engine=((), LORA_ARGS),
        )
        for i, path in enumerate(adapters):
            body = {"lora_name": _adapter(i), "lora_path": path}
            _post_json(f"{lora}/v1/load_lora_adapter", body)
        urls = {arm: off if arm == "off" else lora for arm in ARMS}
        _warm_up(python, urls)
        with open(RAW, "w") as raw:
            for cycle in range(cycles):
                # Rotated each cycle: no arm always runs first (or right after another).
                order = ARMS[cycle % len(ARMS) :] + ARMS[: cycle % len(ARMS)]
                for arm in order:
                    got = _arm(python, urls[arm], arm, requests)
                    del got["texts"]
                    run = {"cycle": cycle, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **got}
                    raw.write(json.dumps(run) + "\n")
                    raw.flush()
                    print(
                        f"   {cycle} {arm:>4}: {run['tokens_per_s']:.1f} tok/s, TTFT p50 "
                        f"{run['ttft_p50_s']:.3f}s p99 {run['ttft_p99_s']:.3f}s",
                        flush=True,
                    )
                    out.append(run)
    return out


def _median(runs: list[dict[str, Any]], arm: str, key: str) -> float:
    return statistics.median(float(r[key]) for r in runs if r["arm"] == arm)


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for arm in ARMS:
        for key in ("tokens_per_s", "ttft_p50_s", "ttft_p99_s"):
            figures[f"lora_{key}_{arm}"] = _median(runs, arm, key)
    off = figures["lora_tokens_per_s_off"]
    figures["lora_enabled_throughput_ratio"] = figures["lora_tokens_per_s_base"] / off
    for n in ADAPTER_COUNTS:
        figures[f"lora_throughput_ratio_{n}"] = figures[f"lora_tokens_per_s_{n}"] / off
    figures[f"lora_ttft_p99_ratio_{ADAPTERS}"] = (
        figures[f"lora_ttft_p99_s_{ADAPTERS}"] / figures["lora_ttft_p99_s_off"]
    )
    return figures


def plot(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [0, *ADAPTER_COUNTS]
    arms = ["base", *(str(n) for n in ADAPTER_COUNTS)]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), dpi=110)
    for ax, key, title, unit in (
        (axes[0], "tokens_per_s", "Output tokens/s", "tokens/s"),
        (axes[1], "ttft_p99_s", f"TTFT p99 (next-to-worst of {REQUESTS}) and p50", "seconds"),
    ):
        for x, arm in zip(counts, arms, strict=True):
            values = [float(r[key]) for r in runs if r["arm"] == arm]
            ax.scatter([x] * len(values), values, color="black", s=10, zorder=3)
        ax.plot(counts, [_median(runs, arm, key) for arm in arms], "o-", color="C0", label="LoRA")
        ax.axhline(_median(runs, "off", key), color="C1", ls="--", label="no --enable-lora")
        if key == "ttft_p99_s":
            p50 = [_median(runs, arm, "ttft_p50_s") for arm in arms]
            ax.plot(counts, p50, "s:", color="C2", label="LoRA, TTFT p50")
        ax.set_xticks(counts, ["base", *map(str, ADAPTER_COUNTS)])
        ax.set_xlabel("adapters the requests are spread over")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.legend(fontsize=8)
    plotting.save(
        fig,
        PLOT,
        f"LoRA on a CPU vLLM engine (tiny model, concurrency {CONCURRENCY}): median of "
        f"{min(sum(r['arm'] == a for r in runs) for a in ARMS)} interleaved cycles, dots cycles",
    )


BENCH = rawruns.RawRuns(
    "bench.lora", __doc__ or "", RAW, ("--cycles", CYCLES, "cycles"), measure, plot, summarize
)
run = BENCH.run
main = BENCH.main

if __name__ == "__main__":
    sys.exit(main())
