"""On the GPU machine (after ../shared/gpu's remote-install.sh and env.sh): where a warm engine's
start goes, second by second. The operator's 8B engine pod reached its first token 46 s after its
container started with a warm compile cache, 28 s of it before the engine began loading
(bench/gpu/operator-start-phases.json); vLLM's logs say nothing of those seconds.

  python3 bench/gpu/start_probe.py $MODELS/llama-3.1-8b --out $OUT/probe [--variant NAME=ENV,...]

Runs `vllm serve` on the operator's command line for that pod (dummy weights), compile caches
(VLLM_CACHE_ROOT, TRITON_CACHE_DIR) in one folder, as the model-cache claim holds them: once cold,
then warm, then warm under py-spy (`record --subprocesses --idle`, 10 samples a second; the binary
dev/gpulab/pack.sh carries, found under /tmp/gpulab/cache/bin or given with --py-spy), then warm
once per variant (extra environment). Each run: seconds from the process's start to /health and
to the first streamed token. Then `python -X importtime` of the API server's module. Writes
runs.jsonl, the logs, py-spy's speedscope profile and timeline.txt: per process, its main
thread's innermost vLLM/torch/transformers frame per half second, runs of one frame merged.
(A faulthandler sampler, tried first, crashed vLLM's start: SIGSEGV.)"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PORT = int(os.environ.get("PROBE_PORT", "8012"))  # two probes at once: one each
SAMPLE_S = 0.5
SPY_RATE = 10


def http(path: str, body: dict[str, Any] | None = None, timeout: float = 5) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", data, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if body is not None:
                r.read(1)  # the first streamed byte: the first token's chunk
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def serve_once(
    model: str,
    cache: Path,
    log: Path,
    env_extra: dict[str, str],
    *,
    load_args: tuple[str, ...] = ("--load-format=dummy",),
    wrap: tuple[str, ...] = (),
) -> dict[str, Any]:
    env = {
        **os.environ,
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        **env_extra,
    }
    # PROBE_ENTRY=api_server: the OpenAI server's own module instead of the `vllm` CLI, which
    # imports every subcommand (bench, collect-env, ...) before it parses the command line.
    entry = (
        ["vllm.entrypoints.openai.api_server", "--model", model]
        if env_extra.get("PROBE_ENTRY") == "api_server"
        else ["vllm.entrypoints.cli.main", "serve", model]
    )
    cmd = [
        *wrap, sys.executable, "-m", *entry,
        "--served-model-name", "model", "--dtype", "auto", "--tensor-parallel-size", "1",
        "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "512",
        "--max-num-batched-tokens", "16384", "--scheduling-policy", "fcfs",
        *load_args, "--port", str(PORT), "--shutdown-timeout", "5",
        "--host", "127.0.0.1",
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    row: dict[str, Any] = {"env": env_extra}
    try:
        while time.monotonic() - t0 < 400:
            if http("/health", timeout=2) == 200:
                row["health_s"] = round(time.monotonic() - t0, 2)
                break
            if proc.poll() is not None:
                row["exited"] = proc.returncode
                return row
            time.sleep(0.2)
        body = {"model": "model", "prompt": "Hello", "max_tokens": 4, "stream": True}
        if http("/v1/completions", body, timeout=120) == 200:
            row["first_token_s"] = round(time.monotonic() - t0, 2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return row


FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
PKG = re.compile(r"/(vllm|torch|transformers|triton|tokenizers|huggingface_hub|flashinfer)/")


def timeline(profile: Path) -> str:
    """Per process, its main thread's innermost frame in vLLM, torch or a library they call."""
    doc = json.loads(profile.read_text())
    frames = doc["shared"]["frames"]
    out: list[str] = []
    for prof in doc["profiles"]:
        m = re.match(r"Process (\d+) Thread (\d+)", prof["name"])
        if m is None or m.group(1) != m.group(2):
            continue  # not a process's main thread
        rows: list[tuple[str, float]] = []
        for stack, weight in zip(prof["samples"], prof["weights"], strict=True):
            found = [frames[i] for i in stack if PKG.search(frames[i]["file"])]
            inner = found[-1] if found else None
            leaf = frames[stack[-1]] if stack else None
            sig = "-" if inner is None else _short(inner)
            if leaf is not None and leaf is not inner:
                sig += f"  <- {_short(leaf)}"
            if rows and rows[-1][0] == sig:
                rows[-1] = (sig, rows[-1][1] + weight)
            else:
                rows.append((sig, weight))
        out.append(f"== {prof['name']}")
        t = 0.0
        for sig, w in rows:
            if w >= SAMPLE_S:
                out.append(f"{t:6.1f}s +{w:5.1f}s {sig}")
            t += w
    return "\n".join(out)


def _short(frame: dict[str, Any]) -> str:
    path = str(frame["file"])
    for marker in ("site-packages/", "site/"):
        path = path.rsplit(marker, maxsplit=1)[-1]
    return f"{path}:{frame['line']} {frame['name']}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--variant", action="append", default=[], help="NAME=K=V,K=V")
    p.add_argument("--py-spy", type=Path, help="default: /tmp/gpulab/cache/bin/py-spy-*/py-spy")
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/probe-cache")
    shutil.rmtree(cache, ignore_errors=True)
    spies = sorted(Path("/tmp/gpulab/cache/bin").glob("py-spy-*/py-spy"))
    spy = args.py_spy or (spies[-1] if spies else None)
    profile = out / "profile.speedscope.json"
    runs: list[tuple[str, dict[str, str], tuple[str, ...]]] = [("cold", {}, ()), ("warm", {}, ())]
    if spy is not None:
        spied: tuple[str, ...] = (
            *(str(spy), "record", "--subprocesses", "--idle", "--rate", str(SPY_RATE)),
            *("--format", "speedscope", "-o", str(profile), "--"),
        )
        runs.append(("warm-sampled", {}, spied))
    for v in args.variant:
        name, _, kvs = v.partition("=")
        runs.append((name, dict(kv.split("=", 1) for kv in kvs.split(",") if kv), ()))
    for name, env, wrap in runs:
        row = {"run": name, **serve_once(args.model, cache, out / f"{name}.log", env, wrap=wrap)}
        print(json.dumps(row), flush=True)
        with (out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
    if profile.exists():
        (out / "timeline.txt").write_text(timeline(profile))
    for mod in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main"):
        importtime(mod, out)
    return 0


def importtime(mod: str, out: Path) -> None:
    imp = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {mod}"],
        check=False,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in imp.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    rows.sort(reverse=True)
    (out / f"importtime-{mod}.txt").write_text(imp.stderr)
    print(f"import {mod}, cumulative (s):")
    for us, depth, name in rows[:20]:
        print(f"  {us / 1e6:6.2f} {' ' * (depth // 2)}{name}")


if __name__ == "__main__":
    sys.exit(main())
