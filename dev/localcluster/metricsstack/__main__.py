"""`python -m localcluster.metricsstack up|down|status|url` (PYTHONPATH=dev), on the running
local cluster."""

from __future__ import annotations

import argparse
import sys

from ..supervisor import Cluster
from .stack import MetricsStack


def main() -> int:
    p = argparse.ArgumentParser(prog="localcluster.metricsstack", description=__doc__)
    p.add_argument("action", choices=["up", "down", "status", "url"])
    args = p.parse_args()
    stack = MetricsStack(Cluster())
    if args.action == "up":
        stack.start()
        print(f"Prometheus at {stack.prometheus_url}")
    elif args.action == "down":
        stack.stop()
        print("metrics stack stopped")
    elif args.action == "url":
        print(stack.prometheus_url)
    else:
        up = stack.running()
        print(f"metrics-stack {'running' if up else 'stopped'}")
        return 0 if up else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
