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
# The run whose replacement pod found the first pod's compile cache (H100, 2026-11-27). The H200
# run of the same day is cold only: its replacement missed the cache through a fault of the lab
# then (each pod's HOME-derived vLLM paths entered vLLM's cache key; fixed in realgpus.py).
RUN = GPU_DIR / "h100-2026-11-27-gpulab.jsonl"
RUN_LOGS = ("h100-gpulab-8b-cache-0.log", "h100-gpulab-8b-cache-1.log")
H200_RUN = GPU_DIR / "h200-2026-11-27-gpulab.jsonl"
SLEEP = GPU_DIR / "h200-2026-11-27-sleep.jsonl"
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


def run() -> dict[str, float]:
    (record,) = _runs(RUN)
    cold, warm = (phases(LOGS / name) for name in RUN_LOGS)
    first, replacement = record["starts"]
    planned = record["status"]["plan"]["kvCacheTokensPerReplica"]
    for timing, found in ((first, cold), (replacement, warm)):
        found["first_token_s"] = round(timing["first_token_s"] - timing["container_running_s"], 1)
    (h200,) = _runs(H200_RUN)
    sleep = {row["step"]: row for row in _runs(SLEEP)}
    PHASES_OUT.write_text(json.dumps({"cold": cold, "warm": warm}, indent=1) + "\n")
    return {
        "gpu_operator_first_token_cold_s": cold["first_token_s"],
        "gpu_operator_first_token_warm_s": warm["first_token_s"],
        "gpu_operator_imports_cold_s": cold["engine_core_loading_s"],
        "gpu_operator_imports_warm_s": warm["engine_core_loading_s"],
        "gpu_operator_compile_cold_s": cold["torch_compile_s"],
        "gpu_operator_compile_warm_s": warm["torch_compile_s"],
        "gpu_operator_compile_cache_init_speedup": round(
            cold["engine_init_s"] / warm["engine_init_s"], 2
        ),
        "gpu_operator_kv_error_cold_pct": round(100 * (cold["kv_cache_tokens"] / planned - 1), 2),
        "gpu_operator_kv_error_warm_pct": round(100 * (warm["kv_cache_tokens"] / planned - 1), 2),
        "gpu_operator_h200_first_token_cold_s": round(
            h200["starts"][0]["first_token_s"] - h200["starts"][0]["container_running_s"], 1
        ),
        "gpu_standby_sleep_s": sleep["sleep level 1"]["s"],
        "gpu_standby_asleep_gpu_gib": round(sleep["gpu used asleep"]["mib"] / 1024, 2),
        "gpu_standby_wake_first_token_s": sleep["first token after wake"]["since_wake_s"],
    }


def main() -> None:
    print(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()
