"""Closed-loop load on vLLM engine pods with the `openai` client (run it with the vLLM
virtualenv's python, which has `openai`; standard library otherwise).

    python loadgen.py --targets pods.json --concurrency 8 --duration 120 --out requests.jsonl

`--targets` is a JSON file {"pods": [{"name": ..., "ip": ..., "port": 8000}, ...]} that the
caller rewrites as pods become Ready or go away (the local cluster's Services get no endpoints for
loopback pod IPs, so clients dial Ready pods directly); it is re-read before each request, and
requests go round robin over the pods it lists. Each of `--concurrency` workers sends one request
at a time until `--duration` seconds passed, `--requests` were sent in all, or `--stop-file`
exists. Every request has a client timeout and no client-side retry; each one's outcome is one
JSON line in `--out`:

    {"pod", "start", "end" (epoch s), "outcome": "ok" | "retryable" | "error", "tokens",
     "finish", "error"}

"retryable" is what a client or router should retry elsewhere: connection refused/reset (a pod
that just stopped) or HTTP 429/503. A summary line goes to stdout at the end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai  # type: ignore[import-not-found,unused-ignore]

RETRYABLE_STATUS = {429, 503}


class Targets:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.mtime = -1.0
        self.pods: list[dict[str, Any]] = []
        self.counter = itertools.count()

    def next(self) -> dict[str, Any] | None:
        with self.lock:
            try:
                mtime = os.stat(self.path).st_mtime
                if mtime != self.mtime:
                    self.pods = json.loads(self.path.read_text())["pods"]
                    self.mtime = mtime
            except (OSError, ValueError, KeyError):
                pass  # being rewritten: keep the last list
            if not self.pods:
                return None
            return self.pods[next(self.counter) % len(self.pods)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--targets", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--requests", type=int, default=0, help="stop after this many (0: no limit)")
    p.add_argument("--stop-file", type=Path)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    p.add_argument("--start-at", type=float, default=0.0, help="epoch seconds to start at")
    p.add_argument("--model", default="", help="default: the first of the pod's /v1/models")
    p.add_argument("--prompt", default="The quick brown fox jumps over the lazy dog.")
    args = p.parse_args(argv)

    targets = Targets(args.targets)
    time.sleep(max(0.0, args.start_at - time.time()))
    deadline = time.monotonic() + args.duration
    issued = itertools.count()
    out_lock = threading.Lock()
    clients: dict[str, Any] = {}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out = open(args.out, "a")  # noqa: SIM115 - closed below, shared by the workers

    def client_for(pod: dict[str, Any]) -> tuple[Any, str]:
        """The pod's client and the model name it serves."""
        base = f"http://{pod['ip']}:{pod.get('port', 8000)}/v1"
        with out_lock:
            if base not in clients:
                c = openai.OpenAI(
                    base_url=base, api_key="unused", timeout=args.timeout, max_retries=0
                )
                # What the engine calls its model (--served-model-name, else --model): on the
                # node runner --model is rewritten to a local directory.
                model = args.model or c.models.list().data[0].id
                clients[base] = (c, model)
            return clients[base]  # type: ignore[no-any-return]

    def stopping() -> bool:
        return time.monotonic() > deadline or bool(args.stop_file and args.stop_file.exists())

    def one(pod: dict[str, Any]) -> dict[str, Any]:
        rec: dict[str, Any] = {"pod": pod["name"], "start": time.time()}
        try:
            c, model = client_for(pod)
            r = c.completions.create(
                model=model,
                prompt=args.prompt,
                max_tokens=args.max_tokens,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            rec.update(
                outcome="ok", tokens=r.usage.completion_tokens, finish=r.choices[0].finish_reason
            )
        except openai.APITimeoutError as e:  # the client gave up: a hung request
            rec.update(outcome="error", error=f"timeout: {e}")
        except openai.APIConnectionError as e:
            rec.update(outcome="retryable", error=f"connection: {e.__cause__ or e}")
        except openai.APIStatusError as e:
            kind = "retryable" if e.status_code in RETRYABLE_STATUS else "error"
            rec.update(outcome=kind, error=f"HTTP {e.status_code}: {e.message}")
        rec["end"] = time.time()
        return rec

    def worker() -> None:
        while not stopping():
            pod = targets.next()
            if pod is None:
                time.sleep(0.2)
                continue
            if args.requests and next(issued) >= args.requests:
                return
            rec = one(pod)
            with out_lock:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            if rec["outcome"] != "ok":
                time.sleep(0.2)  # e.g. a stopped pod: let the caller refresh the list

    started = time.time()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    print(json.dumps({"started": started, "ended": time.time()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
