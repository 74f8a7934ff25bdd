"""`make bench`: run every benchmark (or those named) and record the figures; `--table-only`
(`make bench-tables`) writes the tables from bench/results.json and runs nothing."""

from __future__ import annotations

import argparse
import importlib
import sys
import time

from bench import results

# Each module has `run() -> dict[str, float]`. gpu_model, gpu_four (issue 46's four-GPU runs)
# gpu_start (engine start phases from vLLM's logs) and gpu_operator (engine pods the operator
# started on a GPU, dev/gpulab) need no GPU: they read the GPU runs
# committed under bench/gpu/; tp_published neither:
# it reads published figures (bench/data/).
# spare runs the day replay over kwok GPUs and the preemption on the node runner.
# burst replays llm-d's bursty load (3 x 900 s) on engine stand-ins over the node runner.
# images builds the images from a cold cache (needs root or Docker).
# testloop times `make check` (and `make test` with LLMFLEET_BENCH_MAKE_TEST=1).
BENCHMARKS = (
    "cluster",
    "reconcile",
    "failover",
    "stall",
    "upgrade",
    "autoscaling",
    "scale_to_zero",
    "burst",
    "batch",
    "spare",
    "router",
    "router_prefix",
    "router_hop",
    "lora",
    "gpu_model",
    "gpu_four",
    "gpu_start",
    "gpu_operator",
    "tp_published",
    "images",
    "testloop",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench")
    p.add_argument(
        "names", nargs="*", help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default: all)"
    )
    p.add_argument(
        "--table-only",
        action="store_true",
        help="run no benchmark: write bench/README.md's table and README.md's headline figures "
        "from bench/results.json as it is",
    )
    args = p.parse_args(argv)
    unknown = set(args.names) - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; choose from {BENCHMARKS}")
    if args.table_only:
        if args.names:
            p.error("--table-only runs no benchmark: name none")
        results.write_tables(results.load())
        print(f"wrote {results.BENCH_README} and {results.FRONT_README} from {results.RESULTS}")
        return 0
    names = args.names or list(BENCHMARKS)
    for name in names:
        start = time.monotonic()
        print(f"== bench {name}", flush=True)
        figures = importlib.import_module(f"bench.{name}").run()
        data = results.save(figures)
        results.write_tables(data)
        for k, v in sorted(figures.items()):
            print(f"   {k} = {v:.3f}")
        print(f"   ({time.monotonic() - start:.0f}s)", flush=True)
    print(f"wrote {results.RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
