"""`llmfleet batch run`: the LLMBatchJob runner on a local file, for users without a cluster.

Exactly the code an LLMBatchJob's pods run (`llmfleet.batch.runner`), so a file answered locally
has the same records, and a local run resumes from its output directory just as a pod does. It
needs vLLM in the same Python (`pip install vllm`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

USAGE = "llmfleet batch run --input FILE --output-dir DIR --model MODEL [vLLM engine args]"


class _PassThrough(argparse.ArgumentParser):
    """Hands every argument to the runner's own parser: most of them are vLLM engine arguments,
    which only vLLM knows (and --help prints the runner's full help)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        out = namespace if namespace is not None else argparse.Namespace()
        out.runner_args = list(args or [])
        out.func = _run
        return out, []


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "batch",
        help="run LLMBatchJob work locally",
        description="Offline batch inference of OpenAI Batch API JSONL files with vLLM.",
    )
    kwargs: dict[str, Any] = {"parser_class": _PassThrough}
    sub = parser.add_subparsers(dest="batch_command", required=True, metavar="COMMAND", **kwargs)
    sub.add_parser(
        "run",
        usage=USAGE,
        help="answer a JSONL file with vLLM's offline engine (see `llmfleet batch run --help`)",
    )


def _run(args: argparse.Namespace) -> int:
    from llmfleet.batch import runner

    return runner.main(args.runner_args, prog="llmfleet batch run")
