"""`python -m localcluster.noderunner --state-dir .cluster` (PYTHONPATH=dev).

Usually started by `Cluster.start_node_runner()`, which writes its pidfile so `Cluster.down()`
stops it; stop it alone with SIGTERM (its pod processes go with it).
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from .ipam import POD_NETWORK
from .node import NODE_NAME, Config
from .realgpus import RealGpus
from .runner import REPO, Runner

INSTALL_VLLM = REPO / "dev" / "dataplane" / "install-vllm.sh"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="localcluster.noderunner", description=__doc__)
    p.add_argument("--state-dir", type=Path, required=True, help="the cluster's state directory")
    p.add_argument("--kubeconfig", type=Path, help="default: <state-dir>/node-runner.kubeconfig")
    p.add_argument("--vllm-venv", type=Path, help="default: install-vllm.sh --print-path")
    p.add_argument("--node", default=NODE_NAME)
    p.add_argument("--gpus", type=int, default=4, help="GPU slots: one CPU vLLM process each")
    p.add_argument(
        "--system",
        action="store_true",
        help="a system node (no GPUs, its own taint) for the operator's pod",
    )
    p.add_argument("--pod-network", default=POD_NETWORK, help="loopback CIDR for pod IPs")
    p.add_argument(
        "--model", action="append", default=[], metavar="NAME=DIR", help="model table entry"
    )
    p.add_argument(
        "--real-gpus",
        metavar="PYTHON",
        type=Path,
        help="run pods on this machine's NVIDIA GPUs with this Python's vLLM (dev/gpulab)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stdout,
    )
    real = RealGpus.detect(args.real_gpus) if args.real_gpus else None
    if real is not None:
        venv = args.real_gpus.parent  # unused: Config.python is the GPU Python
    else:
        venv = args.vllm_venv or Path(
            subprocess.run(
                [str(INSTALL_VLLM), "--print-path"], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        if not (venv / "bin" / "python").exists():
            p.error(f"no vLLM virtualenv at {venv}: run {INSTALL_VLLM}")
    cfg = Config(
        state_dir=args.state_dir.resolve(),
        vllm_venv=venv,
        kubeconfig=args.kubeconfig or args.state_dir / "node-runner.kubeconfig",
        node=args.node,
        gpus=args.gpus,
        pod_network=args.pod_network,
        system=args.system,
        models=dict(m.split("=", 1) for m in args.model),
        real_gpus=real,
    )
    runner = Runner(cfg)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        runner.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
