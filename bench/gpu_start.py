"""Issue 44's groundwork: where a vLLM engine's start goes on a GPU, from vLLM's own logs.

No GPU is needed here: it reads the engine logs the GPU runs committed (bench/gpu/logs/) and the
engine lines of their JSONL (`init_s`: `vllm.LLM()` called to ready, as measure.py timed it).
For each engine: weight load, torch.compile (afresh, or loaded from an earlier start's cache:
"Directly load the compiled graph"), the profiling run, CUDA graph capture and vLLM's whole
engine init. These engines ran with dummy weights (no weight I/O), were started by measure.py
rather than by the operator, and had no API server: the phases of a pod's start before vLLM (the
scheduler, the image, the container) and after it (the API server, the router) are not here.
Writes bench/gpu/start-phases.json.

It also holds the planner's start prediction (operator planner/startup.py, fitted to these
runs) against each of them: `startup_prediction_error_max_pct` and `_p50_pct`, comparing the
predicted `vllm.LLM()` to ready (imports, load, compile, graphs, KV profiling; weight I/O nil
as with dummy weights) with `init_s`, warm where the start found a compile cache.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bench.gpu_model import DATA, LOGS
from llmfleet.planner.startup import EngineShape, engine_init_seconds, predict_phases

OUTPUT = DATA / "start-phases.json"
# vLLM 0.26.0's log lines, each the longest of the engine's workers.
PATTERNS = {
    "load_s": r"Model loading took [0-9.]+ GiB and ([0-9.]+) seconds",
    "compile_s": r"torch\.compile took ([0-9.]+) s in total",
    "profile_s": r"Initial profiling/warmup run took ([0-9.]+) s",
    "graph_capture_s": r"Graph capturing finished in ([0-9]+) secs",
    "engine_init_s": r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s",
}
CONFIG = re.compile(r"model='[^']*/([^'/]+)'.*?tensor_parallel_size=(\d+).*?quantization=(\w+)")
# The same shape on the same GPU, started with and without an earlier start's compile cache.
PAIRS = (
    ("8b", "NVIDIA H100 80GB HBM3", "llama-3.1-8b", "None"),
    ("70b_fp8", "NVIDIA H200", "llama-3.1-70b", "fp8"),
)


# Layers of the models the runs started (their config.json: bench/gpu/models/, the catalog).
LAYERS = {
    "llama-3.1-8b": 32,
    "llama-3.1-8b-fp8-ct": 32,
    "llama-3.1-70b": 80,
    "gemma-2-9b": 42,
    "gemma-3-27b-text": 62,
    "qwen2.5-7b": 28,
    "qwen2.5-32b": 64,
    "heldout-deep-10b": 60,
    "heldout-wide-17b": 48,
}


@dataclass(frozen=True)
class Start:
    log: str
    model: str
    gpu: str
    tensor_parallel_size: int
    quantization: str
    compiled_afresh: bool
    init_s: float | None  # vllm.LLM() to ready, measure.py's clock
    load_s: float | None
    compile_s: float | None
    profile_s: float | None
    graph_capture_s: float | None
    engine_init_s: float | None


def _engine_lines() -> dict[str, dict[str, Any]]:
    """Each engine's JSON line by the name of its log (four_gpu.sh's logs carry the run's name)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(DATA.glob("*.jsonl")):
        prefix = "h200x4-" if path.name.startswith("h200x4-") else ""
        for line in path.read_text().splitlines():
            if line.startswith("{") and '"kind": "engine"' in line:
                row = json.loads(line)
                found[prefix + row["tag"]] = row
    return found


def _longest(pattern: str, text: str) -> float | None:
    values = [float(v) for v in re.findall(pattern, text)]
    return max(values) if values else None


def starts() -> list[Start]:
    lines = _engine_lines()
    out = []
    for path in sorted(LOGS.glob("*.log.gz")):
        name = path.name.removesuffix(".log.gz")
        text = gzip.decompress(path.read_bytes()).decode(errors="replace")
        config = CONFIG.search(text)
        row = lines.get(name)
        if config is None or row is None:
            continue
        phases = {key: _longest(pattern, text) for key, pattern in PATTERNS.items()}
        if phases["engine_init_s"] is None:  # cut before it was ready
            continue
        out.append(
            Start(
                log=path.name,
                model=config.group(1),
                gpu=row["gpu"],
                tensor_parallel_size=int(config.group(2)),
                quantization=config.group(3),
                compiled_afresh="Directly load the compiled graph" not in text,
                init_s=row.get("init_s"),
                **phases,
            )
        )
    return out


def run() -> dict[str, float]:
    found = starts()
    figures: dict[str, float] = {}
    for name, gpu, model, quantization in PAIRS:
        same = [s for s in found if (s.gpu, s.model, s.quantization) == (gpu, model, quantization)]
        same = [s for s in same if s.tensor_parallel_size == 1]
        for afresh, label in ((True, "cold"), (False, "warm")):
            inits = [s.engine_init_s for s in same if s.compiled_afresh == afresh]
            figures[f"gpu_engine_init_{name}_{label}_s"] = statistics.median(
                [x for x in inits if x is not None]
            )
        figures[f"gpu_compile_cache_init_speedup_{name}"] = round(
            figures[f"gpu_engine_init_{name}_cold_s"] / figures[f"gpu_engine_init_{name}_warm_s"],
            2,
        )
    cold = [s for s in found if s.compiled_afresh and s.compile_s and s.engine_init_s]
    figures["gpu_engine_init_compile_share_pct"] = round(
        statistics.median(100 * s.compile_s / s.engine_init_s for s in cold if s.compile_s), 1
    )
    figures.update(prediction_errors(found))
    OUTPUT.write_text(json.dumps([asdict(s) for s in found], indent=1) + "\n")
    return figures


def predicted_init_s(start: Start) -> float:
    shape = EngineShape(
        layers=LAYERS[start.model],
        tensor_parallel_size=start.tensor_parallel_size,
        quantized=start.quantization != "None",
        weights_gib_per_gpu=0.0,  # dummy weights: no weight I/O to predict
        download_gib=0.0,
    )
    return engine_init_seconds(predict_phases(shape, compile_cache_warm=not start.compiled_afresh))


def prediction_errors(found: list[Start]) -> dict[str, float]:
    errors = [
        abs(predicted_init_s(s) - s.init_s) / s.init_s * 100 for s in found if s.init_s is not None
    ]
    return {
        "startup_prediction_error_max_pct": round(max(errors), 1),
        "startup_prediction_error_p50_pct": round(statistics.median(errors), 1),
    }


def main() -> None:
    print(json.dumps(run(), indent=2))


if __name__ == "__main__":
    main()
