"""On the GPU machine (after ../shared/gpu's remote-install.sh and env.sh): where a warm engine's
start goes, second by second. The operator's 8B engine pod reached its first token 46 s after its
container started with a warm compile cache, 28 s of it before the engine began loading
(bench/gpu/operator-start-phases.json); vLLM's logs say nothing of those seconds.

  python3 bench/gpu/start_probe.py $MODELS/llama-3.1-8b --out $OUT/probe [--variant NAME=ENV,...]

Runs `vllm serve` on the operator's command line for that pod (dummy weights), compile caches
(VLLM_CACHE_ROOT, TRITON_CACHE_DIR) in one folder, as the model-cache claim holds them: once cold,
then warm with a stack sampler (a sitecustomize that has faulthandler dump every thread of every
vLLM process each 0.5 s, re-armed in forked children), then warm once per variant (extra
environment). Each run: seconds from the process's start to /health and to the first streamed
token. Then `python -X importtime` of the API server's module. Writes runs.jsonl, the logs, the
raw stacks and timeline-<pid>.txt (the main thread's innermost vLLM/torch/transformers frame per
half second, runs of the same frame merged)."""

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

PORT = 8012
SAMPLE_S = 0.5
SITECUSTOMIZE = f"""
import faulthandler, os, time
_d = os.environ.get("PROBE_STACKS")
_keep = []
def _arm():
    f = open(os.path.join(_d, "stacks.%d" % os.getpid()), "w", buffering=1)
    f.write("start %f\\n" % time.time())
    faulthandler.dump_traceback_later({SAMPLE_S}, repeat=True, file=f)
    _keep.append(f)
def _rearm():
    faulthandler.dump_traceback_later({SAMPLE_S}, repeat=True, file=_keep[-1])
if _d:
    _arm()
    # Cancel before forking: a child that inherits a watchdog mid-wait deadlocks on its lock.
    os.register_at_fork(
        before=faulthandler.cancel_dump_traceback_later, after_in_parent=_rearm, after_in_child=_arm
    )
"""


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
    load_args: tuple[str, ...] = ("--load-format=dummy",),
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
        sys.executable, "-m", *entry,
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


def timeline(stacks: Path) -> str:
    """The main thread's innermost frame in vLLM, torch or a library they call, per sample."""
    text = stacks.read_text(errors="replace")
    start = float(text.split("\n", 1)[0].split()[1])
    dumps = text.split("Timeout (")[1:]
    rows: list[tuple[str, int]] = []
    for dump in dumps:
        threads = re.split(r"\n(?=Thread 0x|Current thread 0x)", dump)
        main = next(
            (t for t in threads if "_bootstrap" in t and "multiprocessing" in t),
            None,
        ) or next((t for t in threads if "<module>" in t), threads[-1])
        frames = FRAME.findall(main)
        inner = next((f for f in frames if PKG.search(f[0])), frames[0] if frames else None)
        top = frames[0] if frames else None
        sig = "idle" if inner is None else f"{inner[0].split('site/')[-1]}:{inner[1]} {inner[2]}"
        if top is not None and top != inner:
            sig += f"  <- {top[0].rsplit('/', 1)[-1]}:{top[1]} {top[2]}"
        if rows and rows[-1][0] == sig:
            rows[-1] = (sig, rows[-1][1] + 1)
        else:
            rows.append((sig, 1))
    out, t = [f"start {time.strftime('%H:%M:%S', time.gmtime(start))}"], 0.0
    for sig, n in rows:
        out.append(f"{t:6.1f}s +{n * SAMPLE_S:5.1f}s {sig}")
        t += n * SAMPLE_S
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--variant", action="append", default=[], help="NAME=K=V,K=V")
    args = p.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    cache = Path("/tmp/probe-cache")
    shutil.rmtree(cache, ignore_errors=True)
    site, stacks = out / "site", out / "stacks"
    site.mkdir(exist_ok=True)
    stacks.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    sampled = {
        "PROBE_STACKS": str(stacks),
        "PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}",
    }
    runs = [("cold", {}), ("warm", {}), ("warm-sampled", sampled)]
    for v in args.variant:
        name, _, kvs = v.partition("=")
        runs.append((name, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
    for name, env in runs:
        row = {"run": name, **serve_once(args.model, cache, out / f"{name}.log", env)}
        print(json.dumps(row), flush=True)
        with (out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
    for sf in sorted(stacks.glob("stacks.*")):
        try:
            (out / f"timeline-{sf.name.split('.')[1]}.txt").write_text(timeline(sf))
        except (IndexError, ValueError) as e:
            print(f"{sf.name}: no timeline ({e})")
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
