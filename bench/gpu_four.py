"""Issue 46: the planner's four-GPU choice for a 70B against real vLLM (bench/gpu/four_gpu.sh).

No GPU is needed here: it reads the JSON lines the GPU runs committed (FOUR_GPU_RUNS). Each layout
of Llama-3.1-70B's shape over four GPUs of one host (1 x TP4, 2 x TP2, 4 x TP1; bf16 and vLLM's
online fp8) ran with the planner's own engine arguments for that layout (max_num_seqs from the
candidate table of bench/gpu/plan-70b-4gpu.yaml). Engines of a multi-pod layout ran side by side
and their throughputs add; per-GPU output tok/s = the layout's sum / 4.

For every layout and workload it compares the planner's performance model (the constants it
ships) with what was measured: saturation output tok/s per GPU (512/256 with 2 x max_num_seqs
requests, 2,048/128 with max_num_seqs / 2), batch-1 TTFT at 512 and 2,048 tokens, and the decode
step of one request. Then the choice: the layout `llmfleet plan` picks for each four-GPU twin of
examples/llama-3.1-70b-8xh100.yaml (objective Throughput; the 512/256 workload, and the same twin
with a 2,048/128 workload) against the measured winner. Writes bench/gpu/four-gpu.json.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import yaml

from bench.gpu_model import DATA, GPUS, Engine, Point, engines
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.planner.planning import plan

# 4 x H200 of one host, 2026-11-27 (four_gpu.sh's steps bf16-tp4, bf16-2xtp2, fp8-tp4, fp8-split
# and bf16-2xtp2-prefill). The two-GPU run of the same day (h200x2-2026-11-27-70b-fp8.jsonl) is
# not mixed in: its engines ran on another host.
FOUR_GPU_RUNS = ("h200x4-2026-11-27-70b.jsonl",)
# bf16 2 x TP2's engines ran past their limit before the prefill-heavy run; two fresh engines of
# the same arguments (bf16-2xtp2-prefill) ran it alone.
RERUNS = {"bf16-2xtp2-a": "bf16-2xtp2-pa", "bf16-2xtp2-b": "bf16-2xtp2-pb"}
PLANS = DATA / "plan-70b-4gpu.yaml"
OUTPUT = DATA / "four-gpu.json"
GPUS_IN_HOST = 4
WORKLOADS = ((512, 256), (2048, 128))


@dataclass(frozen=True)
class Layout:
    """A four-GPU layout as run: its engines' tags and how many pods each stands for."""

    name: str  # e.g. "fp8 2 x TP=2"
    quantization: str
    tensor_parallel_size: int
    engines: tuple[tuple[str, int], ...]  # (tag, pods it stands for)


def _layouts(tags: set[str]) -> list[Layout]:
    """The layouts the run's engines make. fp8-split ran one TP2 engine and two TP1 engines at
    once (four_gpu.sh): 2 x TP2 is the TP2 engine twice, 4 x TP1 each TP1 engine twice."""
    known = [
        Layout("bf16 1 x TP=4", "none", 4, (("bf16-tp4", 1),)),
        Layout("bf16 2 x TP=2", "none", 2, (("bf16-2xtp2-a", 1), ("bf16-2xtp2-b", 1))),
        Layout("fp8 1 x TP=4", "fp8", 4, (("fp8-tp4", 1),)),
        Layout("fp8 2 x TP=2", "fp8", 2, (("fp8-tp2", 2),)),
        Layout("fp8 2 x TP=2", "fp8", 2, (("fp8-2xtp2-a", 1), ("fp8-2xtp2-b", 1))),
        Layout("fp8 4 x TP=1", "fp8", 1, (("fp8-tp1-a", 2), ("fp8-tp1-b", 2))),
    ]
    return [lay for lay in known if all(tag in tags for tag, _ in lay.engines)]


def _records(runs: tuple[str, ...]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in runs:
        path = DATA / name
        rows += [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    return rows


def _engines(
    runs: tuple[str, ...], rows: list[dict[str, Any]]
) -> dict[str, tuple[Engine, dict[str, Any]]]:
    """Each engine (gpu_model's reading of its line) with its line (vLLM version, date)."""
    lines = {r["tag"]: r for r in rows if r["kind"] == "engine"}
    return {tag: (engine, lines[tag]) for tag, engine in engines(runs).items()}


def _saturation(
    rows: list[dict[str, Any]], tag: str, prompt: int, output: int
) -> dict[str, Any] | None:
    """The engine's greedy saturation run at `prompt`/`output`; None where it did not finish
    (a run cut by its time limit writes no line)."""
    found = [
        r
        for r in rows
        if r["tag"] in (tag, RERUNS.get(tag))
        and r["kind"] == "saturate"
        and r["sampling"] == "greedy"
        and (r["in"], r["out"]) == (prompt, output)
    ]
    return found[0] if found else None


def _run_tok_s(engine: Engine, sat: dict[str, Any], prompt: int, output: int) -> float:
    """The planner's output tok/s for the run as it ran. What runs at once is the requests, the
    engine's max_num_seqs, or what the planner's KV cache holds of them (vLLM admits by free KV
    blocks). Every request is alike and all arrive at once, so they run in waves: full waves of
    that many, then the rest, whose decode steps cost nearly as much for fewer tokens (the
    prefill-heavy runs held 1.42 waves where the KV cache held fewer than the requests)."""
    held = engine.planner_kv_tokens() // (prompt + output)
    c = max(1, min(sat["nreq"], sat["max_num_seqs"], held))
    full, rest = divmod(sat["nreq"], c)
    seconds = 0.0
    for n, waves in ((c, full), (rest, 1 if rest else 0)):
        if waves:
            rate = Point(engine, "out_tok_s", n, prompt, output, 1).predict()
            seconds += waves * n * output / rate
    return float(sat["nreq"] * output / seconds)


def _pct(predicted: float, measured: float) -> float:
    return round((predicted / measured - 1) * 100, 2)


def compare(runs: tuple[str, ...] = FOUR_GPU_RUNS) -> list[dict[str, Any]]:
    """Per layout and workload: measured and predicted per-GPU saturation throughput; per
    layout: batch-1 TTFT and decode step."""
    rows = _records(runs)
    started = _engines(runs, rows)
    out = []
    for lay in _layouts(set(started)):
        first, info = started[lay.engines[0][0]]
        entry: dict[str, Any] = {
            "layout": lay.name,
            "gpu": first.device,
            "vllm": info["vllm"],
            "date": info["date"],
            "max_num_seqs": info["max_num_seqs"],
            "kv_tokens": {tag: started[tag][0].kv_tokens for tag, _ in lay.engines},
            "planner_kv_tokens": first.planner_kv_tokens(),
            "workloads": [],
        }
        for prompt, output in WORKLOADS:
            measured = 0.0
            predicted = 0.0
            runs = [
                (tag, pods, _saturation(rows, tag, prompt, output)) for tag, pods in lay.engines
            ]
            if any(sat is None for _, _, sat in runs):
                continue
            for tag, pods, sat in runs:
                assert sat is not None
                engine = started[tag][0]
                measured += pods * sat["out_tok_s"]
                predicted += pods * _run_tok_s(engine, sat, prompt, output)
            entry["workloads"].append(
                {
                    "in": prompt,
                    "out": output,
                    "out_tok_s_per_gpu": round(measured / GPUS_IN_HOST, 1),
                    "predicted_out_tok_s_per_gpu": round(predicted / GPUS_IN_HOST, 1),
                    "error_pct": _pct(predicted, measured),
                }
            )
        tag = lay.engines[0][0]
        latency = []
        for r in rows:
            if r["tag"] != tag:
                continue
            if r["kind"] == "ttft":
                point = Point(first, "ttft_ms", 1, r["in"], 1, r["ttft_ms"])
            elif r["kind"] == "point" and r["concurrency"] == 1:
                point = Point(first, "itl_ms", 1, r["in"], r["out"], r["itl_ms"])
            else:
                continue
            latency.append(
                {
                    "what": point.what,
                    "in": point.prompt,
                    "measured": point.measured,
                    "predicted": round(point.predict(), 2),
                    "error_pct": round(point.error_pct(), 2),
                }
            )
        entry["batch1"] = latency
        out.append(entry)
    return out


def _twins(prompt: int, output: int, profile: str) -> list[tuple[str, str]]:
    """(quantization, chosen layout name) for each four-GPU twin planned on `profile` with the
    workload `prompt`/`output`."""
    chosen = []
    for doc in yaml.safe_load_all(PLANS.read_text()):
        spec = doc["spec"]
        if spec["gpus"]["profile"] != profile:
            continue
        spec = {**spec, "workload": {"promptTokens": prompt, "outputTokens": output}}
        p = plan(LLMDeploymentSpec.model_validate(spec))
        quant = "fp8" if spec["model"].get("quantization") == "fp8" else "bf16"
        chosen.append((quant, f"{quant} {p.replicas} x TP={p.tensor_parallel_size}"))
    return chosen


def choices(compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The planner's layout for each twin against the measured fastest per GPU."""
    if not compared:
        return []
    profile = GPUS[compared[0]["gpu"]]
    found = []
    for prompt, output in WORKLOADS:
        per_layout: dict[str, dict[str, float]] = defaultdict(dict)
        for entry in compared:
            quant = entry["layout"].split()[0]
            for w in entry["workloads"]:
                if (w["in"], w["out"]) == (prompt, output):
                    per_layout[quant][entry["layout"]] = w["out_tok_s_per_gpu"]
        for quant, chosen in _twins(prompt, output, profile):
            measured = per_layout.get(quant, {})
            if len(measured) < 2:  # no choice was measured
                continue
            winner = max(measured, key=lambda k: measured[k])
            tp4 = measured.get(f"{quant} 1 x TP=4")
            found.append(
                {
                    "twin": f"{quant}, {profile}, {prompt}/{output}",
                    "planner": chosen,
                    "measured_winner": winner,
                    "measured_per_gpu": measured,
                    "agrees": chosen == winner,
                    "chosen_over_tp4": round(measured[chosen] / tp4, 3)
                    if chosen in measured and tp4
                    else None,
                }
            )
    return found


def run() -> dict[str, float]:
    compared = compare()
    chosen = choices(compared)
    errors = [abs(w["error_pct"]) for e in compared for w in e["workloads"]]
    OUTPUT.write_text(json.dumps({"layouts": compared, "choices": chosen}, indent=2) + "\n")
    example = [c for c in chosen if c["twin"].endswith("512/256")]
    ratios = [c["chosen_over_tp4"] for c in example if c["chosen_over_tp4"]]
    figures = {
        "gpu_four_gpu_tok_s_error_max_pct": max(errors),
        "gpu_four_gpu_tok_s_error_p50_pct": statistics.median(errors),
    }
    # Only where the run measured two layouts of a twin (four GPUs of one host).
    if chosen:
        figures["gpu_four_gpu_choice_agrees"] = float(all(c["agrees"] for c in chosen))
    if ratios:
        figures["gpu_four_gpu_chosen_over_tp4"] = min(ratios)
    return figures


def main() -> None:
    figures = run()
    print(json.dumps(figures, indent=2))
    print(OUTPUT.read_text())


if __name__ == "__main__":
    main()
