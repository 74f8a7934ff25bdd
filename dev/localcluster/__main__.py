"""`python -m localcluster up|down|status|wipe|kubeconfig` (run with PYTHONPATH=dev)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .supervisor import DEFAULT_PROFILE, KEDA_ENV, LWS_ENV, Cluster


def main() -> int:
    p = argparse.ArgumentParser(prog="localcluster", description=__doc__)
    p.add_argument("action", choices=["up", "down", "status", "wipe", "kubeconfig"])
    p.add_argument("--profile", type=Path, default=DEFAULT_PROFILE, help="node-pool profile YAML")
    p.add_argument(
        "--no-lws",
        action="store_true",
        help=f"without the LeaderWorkerSet controller and API (like {LWS_ENV}=0)",
    )
    p.add_argument(
        "--no-keda",
        action="store_true",
        help=f"without KEDA (operator, metrics adapter) and its API (like {KEDA_ENV}=0)",
    )
    args = p.parse_args()
    c = Cluster()
    c.lws = c.lws and not args.no_lws
    c.keda = c.keda and not args.no_keda
    if args.action == "up":
        c.up(args.profile)
    elif args.action == "down":
        c.down()
        print("cluster stopped")
    elif args.action == "wipe":
        c.wipe()
        print(f"cluster stopped and {c.state_dir} removed")
    elif args.action == "kubeconfig":
        print(c.kubeconfig)
    else:
        for name, alive in c.running().items():
            print(f"{name:26} {'running' if alive else 'stopped'}")
        return 0 if c.healthy() else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
