"""Prefix-aware routing: what each vLLM Router policy does to time to first token when requests
share long prefixes, as multi-turn chats with a per-tenant system prompt do.

Real vLLM CPU engines (PREFIX_ENGINES of them, prefix caching on, --max-num-seqs 2, their model
processes below their API servers' priority, as in bench/router.py) serving the prefill-heavy tiny
model (`tiny_model.py --shape prefill`, ~17 M random parameters: the test model prefills too fast
for a cache hit to show in TTFT), behind the real `vllm-router` with the flags the operator
renders for each policy (render/router.py `policy_args`).

Workload, seeded and the same for every policy: TENANTS tenants, each with its own system prompt
of about SYSTEM_TOKENS tokens; SESSIONS_PER_TENANT chat sessions per tenant, all running at once
(12 in flight over the engines' 4 slots, so a queue forms and placement matters), each of TURNS
turns. A turn's prompt is the system prompt, the conversation so far (earlier user messages and
the replies the engine streamed back) and a new user message of about USER_TOKENS tokens; the
reply is MAX_TOKENS tokens, greedy, streamed (TTFT is the first text chunk). Completions API with
the chat template written out, so the router's prefix tree sees exactly the text the engine
tokenizes.

Each run starts cold for every policy: the engines' prefix caches are emptied (POST
/reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1) and a fresh router (an empty prefix tree)
is started. Policies alternate, rotating which goes first each round, so the shared machine's
background load falls on each alike. Per run: TTFT p50 and p99 (of 48 requests the p99 is the
worst), generated tokens/s over the run's wall time, and the prefix-cache hit rate from the
engines' own counters (Δ vllm:prefix_cache_hits_total ÷ Δ vllm:prefix_cache_queries_total, summed
over engines). A policy's figure is the median over its runs; min and max are the spread.

    PYTHONPATH=dev:. .venv/bin/python -m bench.router_prefix [--runs N]
    PYTHONPATH=dev:. .venv/bin/python -m bench.router_prefix --summarize  # from the raw file

Raw runs go to bench/router_prefix_runs.jsonl, the plot to bench/plots/router_prefix.png.
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
from bench.router import (
    INSTALL_ROUTER,
    INSTALL_VLLM,
    SKEW_MAX_NUM_SEQS,
    TINY_MODEL,
    _engines,
    _quantile,
    _router,
    _run_json,
    _venv,
)
from llmfleet.models.router import DEFAULT_ROUTER_POLICY

HERE = Path(__file__).resolve().parent
RAW = HERE / "router_prefix_runs.jsonl"
PLOT = HERE / "plots" / "router_prefix.png"
POLICIES = ("cache_aware", "power_of_two", "round_robin")
BASELINE = "round_robin"
RUNS = 5
PREFIX_ENGINES = 2
TENANTS = 4
SESSIONS_PER_TENANT = 3
TURNS = 4
SYSTEM_TOKENS = 700
USER_TOKENS = 40
MAX_TOKENS = 32
SEED = 20
MAX_MODEL_LEN = 2048
# vLLM's CPU default block is 128 tokens; 32 (a multiple the CPU kernels want) lets a hit cover
# the system prompt and most of the conversation rather than stop up to 127 tokens short.
ENGINE_ARGS = ("--enable-prefix-caching", "--block-size", "32")
# /reset_prefix_cache is a dev-mode endpoint.
ENGINE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
HIT_METRICS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")

CLIENT = """
import concurrent.futures as cf, json, random, sys, threading, time, openai
from tokenizers import Tokenizer
(base, model_dir, tenants, sessions, turns, system_tokens, user_tokens, max_tokens,
 seed) = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:10])
tok = Tokenizer.from_file(model_dir + "/tokenizer.json")
WORDS = ("the model serves requests from a queue while the autoscaler adds replicas when the "
         "fleet is busy and removes them when idle tokens per second time to first token "
         "kubernetes schedules pods onto nodes a deployment keeps replicas running beautiful "
         "explicit simple complex flat sparse readability practicality errors namespaces quick "
         "brown fox jumps over lazy dog hello world capital france paris once upon time").split()
def text(rng, tokens, head=""):
    out = head
    while len(tok.encode(out).ids) < tokens:
        out += " " + " ".join(rng.choice(WORDS) for _ in range(8))
    return out
def turn(role, content):
    return f"<|im_start|>{role}\\n{content}<|im_end|>\\n"
rng = random.Random(seed)
system = [text(rng, system_tokens, f"You are the assistant of tenant {t}.") for t in range(tenants)]
users = {(t, s, k): text(rng, user_tokens, f"Question {k}:")
         for t in range(tenants) for s in range(sessions) for k in range(turns)}
delays = {(t, s): rng.uniform(0, 2) for t in range(tenants) for s in range(sessions)}
c = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=600, max_retries=0)
start = time.perf_counter()
def session(ts):
    t, s = ts
    time.sleep(delays[ts])
    history, out = turn("system", system[t]), []
    for k in range(turns):
        history += turn("user", users[(t, s, k)])
        prompt = history + "<|im_start|>assistant\\n"
        sent = time.perf_counter()
        first, tokens, reply = None, 0, ""
        stream = c.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens,
                                      temperature=0, stream=True,
                                      stream_options={"include_usage": True},
                                      extra_body={"ignore_eos": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                if first is None:
                    first = time.perf_counter() - sent
                reply += chunk.choices[0].text
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        history += turn("assistant", reply)
        out.append({"tenant": t, "session": s, "turn": k, "ttft": first, "tokens": tokens,
                    "prompt_tokens": len(tok.encode(prompt).ids), "sent": sent - start,
                    "done": time.perf_counter() - start})
    return out
keys = [(t, s) for t in range(tenants) for s in range(sessions)]
with cf.ThreadPoolExecutor(len(keys)) as ex:
    out = [r for rs in ex.map(session, keys) for r in rs]
print(json.dumps({"wall": time.perf_counter() - start, "requests": out}))
"""


def _post(url: str) -> Any:
    req = urllib.request.Request(url, b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _reset_prefix_caches(engines: list[str]) -> None:
    for url in engines:
        deadline = time.monotonic() + 60
        # It refuses while blocks are held (requests still finishing); it is retried until free.
        while not _post(f"{url}/reset_prefix_cache").get("success"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} would not reset its prefix cache")
            time.sleep(0.5)


def _hit_counters(engines: list[str]) -> dict[str, float]:
    totals = dict.fromkeys(HIT_METRICS, 0.0)
    for url in engines:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
            for line in r.read().decode().splitlines():
                name = line.split("{", 1)[0].split(" ", 1)[0]
                if name in totals:
                    totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


def _warm_up(python: Path, model: str, engines: list[str]) -> None:
    """One short session straight to each engine: first requests pay one-off costs (allocations,
    kernel selection) that would otherwise land on whichever policy runs first."""
    for url in engines:
        _run_json(python, CLIENT, url, model, 1, 1, 2, SYSTEM_TOKENS, USER_TOKENS, 4, SEED + 1)


def _one_run(
    python: Path, router_venv: Path, model: str, engines: list[str], *, policy: str, workdir: Path
) -> dict[str, Any]:
    _reset_prefix_caches(engines)
    before = _hit_counters(engines)
    with _router(router_venv, policy, engines, workdir, SKEW_MAX_NUM_SEQS) as router:
        got = _run_json(
            python,
            CLIENT,
            router,
            model,
            TENANTS,
            SESSIONS_PER_TENANT,
            TURNS,
            SYSTEM_TOKENS,
            USER_TOKENS,
            MAX_TOKENS,
            SEED,
        )
    after = _hit_counters(engines)
    hits, queries = (after[m] - before[m] for m in HIT_METRICS)
    ttfts = [float(r["ttft"]) for r in got["requests"]]
    return {
        "policy": policy,
        "ttft_p50_s": _quantile(ttfts, 0.5),
        "ttft_p99_s": _quantile(ttfts, 0.99),
        "tokens_per_s": sum(int(r["tokens"]) for r in got["requests"]) / float(got["wall"]),
        "hit_rate": hits / queries if queries else 0.0,
        "prefix_cache_hits": hits,
        "prefix_cache_queries": queries,
        "wall_s": got["wall"],
        "requests": got["requests"],
    }


def measure(runs: int) -> list[dict[str, Any]]:
    vllm = _venv(INSTALL_VLLM)
    router_venv = _venv(INSTALL_ROUTER)
    python = vllm / "bin" / "python"
    model = (
        subprocess.run(
            [str(python), str(TINY_MODEL), "--shape", "prefill"],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="llmfleet-bench-prefix-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        engines = _engines(
            stack,
            python,
            model,
            PREFIX_ENGINES,
            workdir,
            max_model_len=MAX_MODEL_LEN,
            extra_args=ENGINE_ARGS,
            extra_env=ENGINE_ENV,
        )
        _warm_up(python, model, engines)
        with open(RAW, "w") as raw:
            for round_ in range(runs):
                # Rotated each round: no policy always runs first (or right after another).
                order = POLICIES[round_ % 3 :] + POLICIES[: round_ % 3]
                for policy in order:
                    got = _one_run(
                        python, router_venv, model, engines, policy=policy, workdir=workdir
                    )
                    run = {"round": round_, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **got}
                    raw.write(json.dumps(run) + "\n")
                    raw.flush()
                    print(
                        f"   {round_} {policy}: TTFT p50 {run['ttft_p50_s']:.3f}s "
                        f"p99 {run['ttft_p99_s']:.3f}s, {run['tokens_per_s']:.1f} tok/s, "
                        f"hit rate {run['hit_rate']:.3f}",
                        flush=True,
                    )
                    out.append(run)
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    figures: dict[str, float] = {}
    for policy in POLICIES:
        mine = [r for r in runs if r["policy"] == policy]
        for key in ("ttft_p50_s", "ttft_p99_s", "tokens_per_s", "hit_rate"):
            values = [float(r[key]) for r in mine]
            name = key.removesuffix("_s") if key.startswith("ttft") else key
            unit = "_s" if key.startswith("ttft") else ""
            figures[f"router_prefix_{policy}_{key}"] = statistics.median(values)
            figures[f"router_prefix_{policy}_{name}_min{unit}"] = min(values)
            figures[f"router_prefix_{policy}_{name}_max{unit}"] = max(values)
        figures[f"router_prefix_{policy}_runs"] = len(mine)

    def ratio(key: str) -> float:
        a = figures[f"router_prefix_{DEFAULT_ROUTER_POLICY}_{key}"]
        return a / figures[f"router_prefix_{BASELINE}_{key}"]

    figures["router_prefix_ttft_p50_ratio"] = ratio("ttft_p50_s")
    figures["router_prefix_ttft_p99_ratio"] = ratio("ttft_p99_s")
    figures["router_prefix_throughput_ratio"] = ratio("tokens_per_s")
    return figures


def plot(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4), dpi=110)
    for ax, key, title in (
        (axes[0], "ttft_p50_s", "TTFT p50"),
        (axes[1], "ttft_p99_s", "TTFT p99 (worst of 48)"),
    ):
        for i, policy in enumerate(POLICIES):
            values = [float(r[key]) for r in runs if r["policy"] == policy]
            mid = statistics.median(values)
            ax.bar(i, mid, color=f"C{i}", alpha=0.6, width=0.6)
            ax.errorbar(
                i,
                mid,
                yerr=[[mid - min(values)], [max(values) - mid]],
                color="black",
                capsize=6,
            )
            ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
            hits = statistics.median(float(r["hit_rate"]) for r in runs if r["policy"] == policy)
            ax.annotate(f"hit {hits:.0%}", (i, 0), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(POLICIES)), POLICIES)
        ax.set_ylabel("seconds")
        ax.set_title(title)
    plotting.save(
        fig,
        PLOT,
        f"Shared-prefix chats over {PREFIX_ENGINES} CPU engines: median of "
        f"{min(sum(r['policy'] == p for r in runs) for p in POLICIES)} runs, "
        "bars min-max, dots runs",
    )


BENCH = rawruns.RawRuns(
    "bench.router_prefix",
    __doc__ or "",
    RAW,
    ("--runs", RUNS, "runs per policy"),
    measure,
    plot,
    summarize,
)
run = BENCH.run
main = BENCH.main

if __name__ == "__main__":
    sys.exit(main())
