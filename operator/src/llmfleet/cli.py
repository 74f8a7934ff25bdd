"""The `llmfleet` command line: one subcommand per module under `llmfleet.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from llmfleet import __version__

# Each module exposes `register(subparsers)`; it sets `func` on its parser.
_COMMANDS = ("run", "plan", "crds", "batch", "fetch_adapters")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llmfleet",
        description="Plan, deploy and autoscale fleets of vLLM servers on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"llmfleet.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
