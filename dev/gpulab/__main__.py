"""`python3 -m gpulab run` (PYTHONPATH=dev:<lab packages>), on the GPU machine: the local cluster's
control plane, the operator and a node runner on the machine's real GPUs; then an LLMDeployment as
users write it, timed from its creation to its engine's first token and to PlanVerified.

Everything runs as the CPU lab runs it (dev/localcluster), with three differences: no kwok (the
node runner's node is the only node), no LeaderWorkerSet (not carried), and the node runner started
with `--real-gpus` (noderunner/realgpus.py: the pod's vLLM flags as rendered, its own GPUs). KEDA
and the metrics stack (Prometheus, prometheus-adapter, kube-state-metrics) start for the `zero`
scenario only (zero.py).
README.md beside this file has the procedure that carries it to the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from localcluster import nodes
from localcluster.metricsstack import MetricsStack
from localcluster.operator_process import Operator
from localcluster.supervisor import REPO, Cluster

from .scenario import Scenario, run_scenario
from .zero import run_zero

ZERO = "zero"  # zero.py: scale from zero through the router and KEDA

MODELS = Path(os.environ.get("MODELS", "/tmp/models"))


def up(cluster: Cluster, gpu_python: Path, models: dict[str, str], zero: bool) -> Operator:
    took = cluster.up()
    print(f"[gpulab] control plane up in {took:.1f} s", flush=True)
    chart_values: tuple[str, ...] = ()
    if zero:  # KEDA queries the Prometheus that scrapes the routers and the engines
        stack = MetricsStack(cluster).start()
        print(f"[gpulab] metrics stack up: {stack.prometheus_url}", flush=True)
        chart_values = (f"keda.prometheusUrl={stack.prometheus_url}",)
    if not cluster.alive(nodes.RUNNER):
        cluster.procs.start_dev(
            nodes.RUNNER,
            "localcluster.noderunner",
            f"--real-gpus={gpu_python}",
            *(f"--model={name}={path}" for name, path in models.items()),
        )
    nodes.wait_ready(cluster.procs, cluster.api, nodes.RUNNER, nodes.RUNNER_NODE, 60)
    operator = Operator(
        cluster,
        source=REPO / "operator" / "src",
        helm_wait=False,
        chart_values=chart_values,
    )
    operator.install_identity()
    operator.start()
    print("[gpulab] operator leading", flush=True)
    return operator


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpulab", description=__doc__)
    p.add_argument("command", choices=("run", "down"))
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        help=f"scenario.py's SCENARIOS, or {ZERO}",
    )
    p.add_argument("--results", type=Path, default=Path(os.environ.get("OUT", "/tmp/gpulab-out")))
    p.add_argument("--gpu-python", type=Path, default=Path(shutil.which("python3") or "python3"))
    p.add_argument("--model", action="append", default=[], metavar="NAME=DIR", help="model table")
    args = p.parse_args(argv)
    zero = ZERO in args.scenario
    # Read when the cluster is made: KEDA only where a scenario scales from zero.
    os.environ["LLMFLEET_KEDA"] = "1" if zero else "0"
    cluster = Cluster()
    if args.command == "down":
        cluster.down()
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    models = {
        "meta-llama/Llama-3.1-8B-Instruct": str(MODELS / "llama-3.1-8b"),
        "meta-llama/Llama-3.1-70B-Instruct": str(MODELS / "llama-3.1-70b"),
    } | dict(m.split("=", 1) for m in args.model)
    up(cluster, args.gpu_python, models, zero)
    for name in args.scenario:
        t0 = time.time()
        if name == ZERO:
            records = run_zero(cluster, args.results)
        else:
            records = [run_scenario(cluster, Scenario.named(name), args.results)]
        for record in records:
            record["wall_s"] = round(time.time() - t0, 1)
            with (args.results / "gpulab.jsonl").open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"[gpulab] {json.dumps(record)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
