"""On the GPU machine (after ../shared/gpu's remote-install.sh and env.sh): vLLM's sleep mode as
`vllm serve` exposes it, the contract the lab's engine stand-in follows (dev/localcluster/standin)
and the figures standby engines rest on. One JSON line per step on stdout and in --results.

  python3 bench/gpu/sleep_contract.py $MODELS/llama-3.1-8b --results $OUT/sleep.jsonl
  python3 bench/gpu/sleep_contract.py $MODELS/llama-3.1-8b --tp 2 --cycles 5 --results $OUT/c.jsonl

Starts `vllm serve MODEL --load-format dummy --enable-sleep-mode` with VLLM_SERVER_DEV_MODE=1,
then: a completion (awake), GET /is_sleeping, POST /sleep?level=1 (timed), GET /is_sleeping,
the GPU memory in use while asleep (nvidia-smi), a completion sent while asleep (does it wait or
fail?), POST /wake_up (timed) and the first token after it; the same without dev mode shows
which paths exist only in it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PORT = 8011


def call(
    method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 600
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}", data, {"Content-Type": "application/json"}, method=method
    )
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    except OSError as e:
        text, status = repr(e), 0
    return {
        "path": path,
        "method": method,
        "status": status,
        "s": round(time.monotonic() - t0, 3),
        "body": text[:300],
    }


def completion(timeout: float = 600) -> dict[str, Any]:
    return call(
        "POST", "/v1/completions", {"model": "m", "prompt": "Hello", "max_tokens": 1}, timeout
    )


def gpu_used_mib() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0])


def serve(model: str, dev_mode: bool, log: Path, tp: int = 1) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1" if dev_mode else "0"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--served-model-name",
        "m",
        "--load-format",
        "dummy",
        "--max-model-len",
        "8192",
        "--enable-sleep-mode",
        "--tensor-parallel-size",
        str(tp),
        "--port",
        str(PORT),
        "--host",
        "127.0.0.1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 400:
        if call("GET", "/health", timeout=2)["status"] == 200:
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}; see {log}")
        time.sleep(0.5)
    raise TimeoutError("vllm serve not healthy after 400 s")


def gpus_used_mib() -> list[int]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [int(x) for x in out]


def cycles(model: str, tp: int, n: int, results: Path) -> int:
    """Is sleep reliable at this TP? n rounds of sleep, wake and a completion, each bounded: a call
    that does not answer within its bound is a hang (sleep at TP > 1 has been reported to hang)."""
    proc = serve(model, True, results.with_suffix(".log"), tp)
    hung = 0
    try:
        for i in range(n):
            row: dict[str, Any] = {"step": "cycle", "tp": tp, "i": i}
            row["sleep"] = call("POST", "/sleep?level=1", timeout=240)
            row["asleep_mib"] = gpus_used_mib()
            row["wake"] = call("POST", "/wake_up", timeout=120)
            t0 = time.monotonic()
            row["completion"] = completion(timeout=60)
            row["first_token_after_wake_s"] = round(row["wake"]["s"] + time.monotonic() - t0, 3)
            ok = all(row[k]["status"] == 200 for k in ("sleep", "wake", "completion"))
            row["ok"] = ok
            print(json.dumps(row), flush=True)
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if not ok:
                hung += 1
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 1 if hung else 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--cycles", type=int, default=0, help="only the sleep/wake rounds, n times")
    args = p.parse_args()
    if args.cycles:
        return cycles(args.model, args.tp, args.cycles, args.results)
    rows: list[dict[str, Any]] = []

    def note(step: str, **kv: Any) -> None:
        row = {"step": step, **kv}
        rows.append(row)
        print(json.dumps(row), flush=True)
        with args.results.open("a") as f:
            f.write(json.dumps(row) + "\n")

    log = args.results.with_suffix(".log")
    proc = serve(args.model, True, log)
    try:
        note("awake completion", **completion())
        note("is_sleeping awake", **call("GET", "/is_sleeping"))
        note("gpu used awake", mib=gpu_used_mib())
        note("sleep level 1", **call("POST", "/sleep?level=1"))
        note("is_sleeping asleep", **call("GET", "/is_sleeping"))
        note("gpu used asleep", mib=gpu_used_mib())
        held: dict[str, Any] = {}
        t = threading.Thread(target=lambda: held.update(completion(timeout=120)))
        t.start()
        time.sleep(3)
        note("completion while asleep, after 3 s", answered=not t.is_alive())
        t0 = time.monotonic()
        note("wake_up", **call("POST", "/wake_up"))
        first = completion()
        note("first token after wake", **first, since_wake_s=round(time.monotonic() - t0, 3))
        t.join(timeout=120)
        note("completion sent while asleep", **held)
        for path in (
            "/collective_rpc",
            "/reset_prefix_cache",
            "/server_info",
            "/pause",
            "/is_paused",
        ):
            method = "GET" if path in ("/server_info", "/is_paused") else "POST"
            body = {"method": "get_model_info"} if path == "/collective_rpc" else None
            note("dev path", **call(method, path, body, timeout=30))
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    proc = serve(args.model, False, log)
    try:
        for method, path in (
            ("POST", "/sleep?level=1"),
            ("POST", "/wake_up"),
            ("GET", "/is_sleeping"),
        ):
            note("without dev mode", **call(method, path, timeout=30))
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
