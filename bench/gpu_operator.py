"""Engine pods started by the operator itself on a real GPU (dev/gpulab, issue 44): from the pod's
container start to its first token, phase by phase from the pod's vLLM log, cold and with the
compile cache an earlier pod left on the model cache claim; the KV cache vLLM allocated against
the plan (PlanVerified); and vLLM's sleep mode as `vllm serve` exposes it (bench/gpu/
sleep_contract.py), the figures standby engines rest on. Reads the committed runs; needs no GPU.

  make bench BENCH=gpu_operator
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

GPU_DIR = Path(__file__).resolve().parent / "gpu"
LOGS = GPU_DIR / "logs"
# Two runs of the `8b-cache` scenario on 2026-11-27, each a first pod compiling afresh and a
# replacement that finds the first one's cache on the model cache claim:
# - H200, with the compile cache as shipped: VLLM_CACHE_ROOT and TRITON_CACHE_DIR on the claim.
# - H100, before TRITON_CACHE_DIR: vLLM's compile cache alone on the claim, so the replacement
#   JIT-compiled the sampler's Triton kernels again (about 18 s after CUDA graph capture).
# An earlier H200 run (h200-2026-11-27-gpulab.jsonl) is cold only: its replacement missed the
# cache through a fault of the lab then (each pod's HOME-derived vLLM paths entered vLLM's cache
# key; fixed in realgpus.py).
# - 2026-11-28, two H200s: Llama-3.1-70B fp8 on one of them (`70b-fp8`), the replacement on the
#   other GPU, so it did not wait for its predecessor's.
RUNS = {
    "": (GPU_DIR / "h200-2026-11-27-gpulab-triton.jsonl", "h200-gpulab-triton-8b-cache"),
    "h100_no_triton_cache_": (GPU_DIR / "h100-2026-11-27-gpulab.jsonl", "h100-gpulab-8b-cache"),
    "70b_fp8_": (GPU_DIR / "h200x2-2026-11-28-gpulab-70b-fp8.jsonl", "h200x2-gpulab-70b-fp8"),
    # - 2026-11-28, two H200s: real bytes (`8b-real`), a checkpoint of random weights that
    #   load_probe.py wrote to the machine's disk, page cache dropped before the first pod.
    "8b_real_": (GPU_DIR / "h200x2-2026-11-28-gpulab-8b-real.jsonl", "h200x2-gpulab-8b-real"),
}
# Scale from zero through the router and KEDA (dev/gpulab/zero.py): one request at zero to each of
# two LLMDeployments at once, `warm` (compile cache on the claim) and `cold` (in the pod).
ZERO = GPU_DIR / "h200x2-2026-11-28-gpulab-zero.jsonl"
# vLLM's loading options on that checkpoint (load_probe.py time), page cache dropped and warm.
LOAD = GPU_DIR / "h200x2-2026-11-28-load.jsonl"
SLEEP = GPU_DIR / "h200-2026-11-27-sleep.jsonl"
# Five rounds of sleep, wake and a completion on one TP2 engine (sleep_contract.py --cycles).
SLEEP_TP2 = GPU_DIR / "h200x2-2026-11-28-sleep-tp2.jsonl"
# Two 8B replicas (Auto chose two TP1 pods for two GPUs) started at once on one model cache claim.
TWO_AT_ONCE = ("h200x2-gpulab-two-8b-0", "h200x2-gpulab-two-8b-1")
# vLLM's own `vllm serve` on the same machine, no operator: where a warm start's time goes.
PROBE = GPU_DIR / "h200x2-2026-11-28-start-probe.jsonl"
PHASES_OUT = GPU_DIR / "operator-start-phases.json"

_START = re.compile(r"===== (\S+Z) node-runner: start vllm")
_STAMP = re.compile(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) ")


def _at(line: str, year: int) -> float | None:
    m = _STAMP.search(line)
    if m is None:
        return None
    when = dt.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
    return when.replace(tzinfo=dt.UTC).timestamp()


def _number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    if m is None:
        raise ValueError(f"no {pattern!r} in the log")
    return float(m.group(1))


def phases(log: Path) -> dict[str, float]:
    """Seconds of each phase of one engine start, from its container's start (the node runner's
    line; vLLM's own lines have whole seconds)."""
    text = log.read_text()
    m = _START.search(text)
    if m is None:
        raise ValueError(f"{log}: no container start")
    start = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    t0, year = start.timestamp(), start.year

    def first(marker: str) -> float:
        for line in text.splitlines():
            if marker in line and (t := _at(line, year)) is not None:
                return round(t - t0, 1)
        raise ValueError(f"{log}: no line with {marker!r}")

    return {
        "api_server_imported_s": first("version 0.26.0"),
        "engine_core_loading_s": first("Loading model from scratch"),
        "weight_load_s": _number(r"Model loading took [\d.]+ GiB and ([\d.]+) seconds", text),
        "torch_compile_s": _number(r"torch\.compile took ([\d.]+) s in total", text),
        "cuda_graphs_s": _number(r"Graph capturing finished in ([\d.]+) secs", text),
        "engine_init_s": _number(r"init engine .* took ([\d.]+) s", text),
        "api_ready_s": first("Starting vLLM server"),
        "kv_cache_tokens": _number(r"GPU KV cache size: ([\d,]+) tokens", text.replace(",", "")),
    }


def _runs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def one_run(path: Path, logs: str) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    (record,) = _runs(path)
    cold, warm = (phases(LOGS / f"{logs}-{i}.log") for i in (0, 1))
    first, replacement = record["starts"]
    planned = record["status"]["plan"]["kvCacheTokensPerReplica"]
    for timing, found in ((first, cold), (replacement, warm)):
        found["first_token_s"] = round(timing["first_token_s"] - timing["container_running_s"], 1)
    return {"cold": cold, "warm": warm}, {
        "first_token_cold_s": cold["first_token_s"],
        "first_token_warm_s": warm["first_token_s"],
        "imports_cold_s": cold["engine_core_loading_s"],
        "imports_warm_s": warm["engine_core_loading_s"],
        "compile_cold_s": cold["torch_compile_s"],
        "compile_warm_s": warm["torch_compile_s"],
        "compile_cache_init_speedup": round(cold["engine_init_s"] / warm["engine_init_s"], 2),
        "kv_error_cold_pct": round(100 * (cold["kv_cache_tokens"] / planned - 1), 2),
        "kv_error_warm_pct": round(100 * (warm["kv_cache_tokens"] / planned - 1), 2),
    } | _against_cached_plan(record, warm)


def _against_cached_plan(record: dict[str, Any], warm: dict[str, float]) -> dict[str, float]:
    """The warm engine against the plan's figure for an engine that finds its compile cache
    (status.plan.kvCacheTokensCompileCached; runs before it had none)."""
    cached = record["status"]["plan"].get("kvCacheTokensCompileCached")
    if cached is None:
        return {}
    return {"kv_error_warm_cached_plan_pct": round(100 * (warm["kv_cache_tokens"] / cached - 1), 2)}


def run() -> dict[str, float]:
    figures: dict[str, float] = {}
    all_phases: dict[str, Any] = {}
    for suffix, (path, logs) in RUNS.items():  # the prefix of the run's figures
        found, run_figures = one_run(path, logs)
        all_phases[path.name] = found
        figures |= {f"gpu_operator_{suffix}{k}": v for k, v in run_figures.items()}
    sleep = {row["step"]: row for row in _runs(SLEEP)}
    real = all_phases[RUNS["8b_real_"][0].name]["cold"]
    figures["gpu_operator_8b_real_weight_load_cold_s"] = round(real["weight_load_s"], 1)
    at_zero = zero(all_phases)
    PHASES_OUT.write_text(json.dumps(all_phases, indent=1) + "\n")
    return (
        figures
        | {
            "gpu_standby_sleep_s": sleep["sleep level 1"]["s"],
            "gpu_standby_asleep_gpu_gib": round(sleep["gpu used asleep"]["mib"] / 1024, 2),
            "gpu_standby_wake_first_token_s": sleep["first token after wake"]["since_wake_s"],
        }
        | tp2_sleep()
        | two_at_once()
        | probe()
        | at_zero
        | load()
    )


def tp2_sleep() -> dict[str, float]:
    rounds = [r for r in _runs(SLEEP_TP2) if r["step"] == "cycle"]
    return {
        "gpu_standby_tp2_rounds_ok": sum(1 for r in rounds if r["ok"]),
        "gpu_standby_tp2_rounds": len(rounds),
        # The first sleep pins the host buffers the weights go to; later ones reuse them.
        "gpu_standby_tp2_first_sleep_s": rounds[0]["sleep"]["s"],
        "gpu_standby_tp2_sleep_max_s": max(r["sleep"]["s"] for r in rounds[1:]),
        "gpu_standby_tp2_wake_first_token_max_s": max(
            r["first_token_after_wake_s"] for r in rounds
        ),
        "gpu_standby_tp2_asleep_gpu_gib": round(
            max(max(r["asleep_mib"]) for r in rounds) / 1024, 2
        ),
    }


def two_at_once() -> dict[str, float]:
    found = [phases(LOGS / f"{name}.log") for name in TWO_AT_ONCE]
    tokens = {f["kv_cache_tokens"] for f in found}
    if len(tokens) != 1:
        raise ValueError(f"two replicas at once allocated different KV caches: {tokens}")
    return {
        "gpu_operator_two_at_once_engine_init_max_s": max(f["engine_init_s"] for f in found),
        "gpu_operator_two_at_once_compile_max_s": max(f["torch_compile_s"] for f in found),
    }


def probe() -> dict[str, float]:
    runs = _runs(PROBE)
    warm = sorted(r["first_token_s"] for r in runs if r["run"] == "warm" and "first_token_s" in r)
    entry = [r["first_token_s"] for r in runs if r["run"] == "api-server"]
    return {
        "gpu_serve_warm_first_token_median_s": warm[len(warm) // 2],
        "gpu_serve_warm_first_token_api_server_entry_median_s": sorted(entry)[len(entry) // 2],
    }


def zero(all_phases: dict[str, Any]) -> dict[str, float]:
    """A streamed completion sent through the router at zero, to its first token; KEDA's part
    (the send to the engine pod's creation) and the router's (the pod Ready to the first token).
    The pod's phases join operator-start-phases.json."""
    out: dict[str, float] = {}
    for record in _runs(ZERO):
        case = record["scenario"].removeprefix("zero-")
        if record.get("http_status") != 200 or not record.get("tokens"):
            raise ValueError(f"the request at zero ({case}) was not answered: {record}")
        marks = record["at_zero"]
        found = phases(LOGS / f"h200x2-gpulab-zero-{case}-1.log")
        found["first_token_s"] = round(record["first_token_s"] - marks["container_running_s"], 1)
        all_phases.setdefault(ZERO.name, {})[case] = found
        suffix = "" if case == "warm" else f"_{case}"
        out |= {
            f"gpu_scale_from_zero_first_token{suffix}_s": record["first_token_s"],
            f"gpu_scale_from_zero_keda{suffix}_s": marks["pod_created_s"],
            f"gpu_scale_from_zero_router_admission{suffix}_s": round(
                record["first_token_s"] - marks["pod_ready_s"], 2
            ),
        }
    return out


def load() -> dict[str, float]:
    """vLLM's `Model loading took` for each loading option, page cache dropped and warm."""
    rows = [r for r in _runs(LOAD) if r["step"] == "serve"]
    return {
        f"gpu_weight_load_8b_{r['option']}_{r['page_cache']}_s": round(r["load_s"], 1) for r in rows
    }


def main() -> None:
    print(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()
