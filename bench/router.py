"""vLLM Router figures: what the router adds per request, how many requests it passes, and what
its default policy (power_of_two) buys over round_robin under a skewed load.

The router is the same `vllm-router` the operator renders (dev/dataplane/install-vllm-router.sh)
with the operator's flags, but with static `--worker-urls` instead of Kubernetes discovery, in
front of real vLLM CPU engines (the tiny test model) run as plain processes on loopback: the
figures are about the router, not the cluster, and the cluster's engine pods are the same
processes anyway.

* Overhead: sequential requests (max_tokens 1), alternately straight to one engine and through a
  router that has only that engine; the figure is the per-pair latency difference (p50, p99).
  Single-worker routers use round_robin: static mode refuses power_of_two below two workers.
* Throughput: the router in front of a no-op upstream (a canned completion from an aiohttp server),
  driven by an aiohttp client at concurrency 64 for 10 s. Client, upstream and router share the 2
  cores, so this is a floor for the router's capacity, not its ceiling.
* Skew: SKEW_ENGINES engines with --max-num-seqs 2, their model processes below their API
  servers' priority as the node runner runs engine pods (docs/cpu-adaptations.md, item 15);
  SKEW_REQUESTS streamed requests at concurrency SKEW_CONCURRENCY, a seeded quarter of them long
  (SKEW_LONG tokens), the rest short (SKEW_SHORT);
  the same sequence through power_of_two and through round_robin, twice each, alternating.
  Ratios are power_of_two ÷ round_robin: TTFT p99 (lower is better) and generated tokens/s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from localcluster.noderunner import procs
from localcluster.noderunner.adaptations import adapt_env
from localcluster.noderunner.pods import MODEL_NICE
from localcluster.supervisor import REPO

from llmfleet.render.router import ROUTER_LOG, policy_args

HERE = Path(__file__).resolve().parent
INSTALL_VLLM = REPO / "dev" / "dataplane" / "install-vllm.sh"
INSTALL_ROUTER = REPO / "dev" / "dataplane" / "install-vllm-router.sh"
TINY_MODEL = REPO / "dev" / "dataplane" / "tiny_model.py"
HOST = "127.0.0.1"
OVERHEAD_PAIRS = 200
RPS_SECONDS = 10
RPS_CONCURRENCY = 64
SKEW_ENGINES = 3
SKEW_MAX_NUM_SEQS = 2
SKEW_REQUESTS = 72
SKEW_CONCURRENCY = 9  # 1.5x the engines' 6 slots: a queue forms, so placement matters
SKEW_LONG = 192
SKEW_SHORT = 8
SKEW_SEED = 7
STARTUP_TIMEOUT = 300

# With static --worker-urls, vllm-router refuses power_of_two below two workers (with discovery, as
# the operator runs it, it does not); one worker makes every policy the same pass-through.
SINGLE_WORKER_POLICY = "round_robin"
# The operator's router flags (render/router.py) that apply without discovery.
ROUTER_FLAGS = (
    "--worker-startup-check-interval",
    "1",
    "--health-check-interval-secs",
    "10",
)

OVERHEAD_CLIENT = """
import json, sys, time, urllib.request
direct, routed, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"model": "tiny", "prompt": "Hi", "max_tokens": 1}).encode()
def call(base):
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(base + "/v1/completions", body, headers)
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return time.perf_counter() - t
for _ in range(10):
    call(direct); call(routed)
diffs = []
for i in range(pairs):
    if i % 2:
        d = call(direct); r = call(routed)
    else:
        r = call(routed); d = call(direct)
    diffs.append(r - d)
print(json.dumps(diffs))
"""

STUB_UPSTREAM = """
import sys
from aiohttp import web
BODY = (b'{"id":"x","object":"text_completion","model":"tiny","choices":[{"index":0,'
        b'"text":"a","finish_reason":"length"}],"usage":{"prompt_tokens":1,'
        b'"completion_tokens":1,"total_tokens":2}}')
async def completion(request):
    await request.read()
    return web.Response(body=BODY, content_type="application/json")
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.add_routes([web.post("/v1/completions", completion), web.get("/health", health)])
web.run_app(app, host=sys.argv[1], port=int(sys.argv[2]), access_log=None, print=None)
"""

RPS_CLIENT = """
import asyncio, json, sys, time, aiohttp
base, seconds, conc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
body = {"model": "tiny", "prompt": "Hi", "max_tokens": 1}
async def main():
    done = errors = 0
    end = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:
        async def worker():
            nonlocal done, errors
            while time.perf_counter() < end:
                async with s.post(base + "/v1/completions", json=body) as r:
                    await r.read()
                    if r.status == 200:
                        done += 1
                    else:
                        errors += 1
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        took = time.perf_counter() - start
    print(json.dumps({"rps": done / took, "errors": errors}))
asyncio.run(main())
"""

SKEW_CLIENT = """
import concurrent.futures as cf, json, random, sys, time, openai
base, n, conc, long_, short, seed = sys.argv[1], *map(int, sys.argv[2:7])
rng = random.Random(seed)
sizes = [long_ if rng.random() < 0.25 else short for _ in range(n)]
c = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=600, max_retries=0)
def one(i):
    t = time.perf_counter()
    first, tokens = None, 0
    stream = c.completions.create(model="tiny", prompt=f"Request {i}", max_tokens=sizes[i],
                                  stream=True, extra_body={"ignore_eos": True})
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].text:
            first = time.perf_counter() - t
        tokens += 1
    return {"ttft": first, "tokens": tokens, "short": sizes[i] == short}
start = time.perf_counter()
with cf.ThreadPoolExecutor(conc) as ex:
    out = list(ex.map(one, range(n)))
print(json.dumps({"wall": time.perf_counter() - start, "requests": out}))
"""


def _venv(install: Path) -> Path:
    out = subprocess.run([str(install)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def _port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not answering after {timeout}s")


@contextmanager
def _process(
    argv: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            argv, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


@contextmanager
def _model_below_api_server(servers: dict[str, int]) -> Iterator[None]:
    """What the node runner does for engine pods: every 2 s, the threads of each engine's model
    processes (marked `servers` key, API server pid the value) go to MODEL_NICE."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(2):
            for mark, server in servers.items():
                procs.lower_priority(mark, spare=server, nice=MODEL_NICE)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _engines(
    stack: ExitStack,
    python: Path,
    model: str,
    count: int,
    workdir: Path,
    *,
    max_model_len: int = 512,
    max_num_seqs: int = SKEW_MAX_NUM_SEQS,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    args_by_engine: tuple[tuple[str, ...], ...] = (),
) -> list[str]:
    """`count` engines started at once, their URLs once every one answers /health; each gets
    `extra_args` and, where given, its own entry of `args_by_engine`."""
    if args_by_engine and len(args_by_engine) != count:
        raise ValueError(f"args_by_engine has {len(args_by_engine)} entries for {count} engines")
    urls = []
    servers: list[subprocess.Popen[bytes]] = []
    marks: dict[str, int] = {}
    for i in range(count):
        mark = procs.marker(f"bench-router.{os.getpid()}", f"engine-{i}")
        # The node runner's environment for a vLLM process (KV cache size, AMX permission).
        env = adapt_env(
            {**os.environ, **(extra_env or {}), "HOME": str(workdir), procs.MARKER_ENV: mark}
        )
        port = _port()
        argv = [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--served-model-name",
            "tiny",
            "--max-model-len",
            str(max_model_len),
            "--max-num-seqs",
            str(max_num_seqs),
            "--enforce-eager",
            "--host",
            HOST,
            "--port",
            str(port),
            *extra_args,
            *(args_by_engine[i] if args_by_engine else ()),
        ]
        server = stack.enter_context(_process(argv, workdir / f"engine-{i}.log", env))
        servers.append(server)
        marks[mark] = server.pid
        urls.append(f"http://{HOST}:{port}")
    stack.enter_context(_model_below_api_server(marks))
    for url, server in zip(urls, servers, strict=True):
        _wait_http(f"{url}/health", STARTUP_TIMEOUT, server)
    return urls


@contextmanager
def _router(
    venv: Path, policy: str, workers: list[str], workdir: Path, max_num_seqs: int
) -> Iterator[str]:
    port, metrics = _port(), _port()
    argv = [
        str(venv / "bin" / "vllm-router"),
        "--host",
        HOST,
        "--port",
        str(port),
        # With the flags the operator renders for this policy.
        *policy_args(policy, max_num_seqs),
        "--worker-urls",
        *workers,
        "--prometheus-host",
        HOST,
        "--prometheus-port",
        str(metrics),
        *ROUTER_FLAGS,
    ]
    env = {**os.environ, "RUST_LOG": ROUTER_LOG}
    with _process(argv, workdir / f"router-{policy}.log", env) as proc:
        url = f"http://{HOST}:{port}"
        _wait_http(f"{url}/readiness", 120, proc)
        yield url


def _run_json(python: Path, code: str, *args: object, timeout: float = 1800) -> Any:
    out = subprocess.run(
        [str(python), "-c", code, *map(str, args)],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    value: float = ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
    return value


def overhead(python: Path, venv: Path, engine: str, workdir: Path) -> dict[str, float]:
    with _router(venv, SINGLE_WORKER_POLICY, [engine], workdir, SKEW_MAX_NUM_SEQS) as router:
        diffs = _run_json(python, OVERHEAD_CLIENT, engine, router, OVERHEAD_PAIRS)
    return {
        "router_overhead_p50_ms": 1000 * _quantile(diffs, 0.5),
        "router_overhead_p99_ms": 1000 * _quantile(diffs, 0.99),
    }


def throughput(venv: Path, workdir: Path) -> dict[str, float]:
    python = venv / "bin" / "python"
    port = _port()
    with _process([str(python), "-c", STUB_UPSTREAM, HOST, str(port)], workdir / "stub.log") as p:
        upstream = f"http://{HOST}:{port}"
        _wait_http(f"{upstream}/health", 30, p)
        with _router(venv, SINGLE_WORKER_POLICY, [upstream], workdir, SKEW_MAX_NUM_SEQS) as router:
            got = _run_json(python, RPS_CLIENT, router, RPS_SECONDS, RPS_CONCURRENCY)
    if got["errors"]:
        raise RuntimeError(f"router answered {got['errors']} requests with an error")
    return {"router_rps": float(got["rps"])}


def skew(python: Path, venv: Path, engines: list[str], workdir: Path) -> dict[str, float]:
    runs: dict[str, list[dict[str, Any]]] = {"power_of_two": [], "round_robin": []}
    for policy in ("round_robin", "power_of_two", "round_robin", "power_of_two"):
        with _router(venv, policy, engines, workdir, SKEW_MAX_NUM_SEQS) as router:
            runs[policy].append(
                _run_json(
                    python,
                    SKEW_CLIENT,
                    router,
                    SKEW_REQUESTS,
                    SKEW_CONCURRENCY,
                    SKEW_LONG,
                    SKEW_SHORT,
                    SKEW_SEED,
                )
            )

    def ttft_p99(policy: str) -> float:
        return _quantile([r["ttft"] for run in runs[policy] for r in run["requests"]], 0.99)

    def tokens_per_s(policy: str) -> float:
        tokens = sum(int(r["tokens"]) for run in runs[policy] for r in run["requests"])
        return tokens / sum(float(run["wall"]) for run in runs[policy])

    for policy in runs:
        print(f"   {policy}: TTFT p99 {ttft_p99(policy):.3f}s, {tokens_per_s(policy):.1f} tok/s")
    return {
        "router_skew_ttft_p99_ratio": ttft_p99("power_of_two") / ttft_p99("round_robin"),
        "router_skew_throughput_ratio": tokens_per_s("power_of_two") / tokens_per_s("round_robin"),
    }


def run() -> dict[str, float]:
    vllm = _venv(INSTALL_VLLM)
    router = _venv(INSTALL_ROUTER)
    python = vllm / "bin" / "python"
    model = (
        subprocess.run([str(python), str(TINY_MODEL)], check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="llmfleet-bench-router-") as tmp:
        workdir = Path(tmp)
        figures |= throughput(router, workdir)
        with ExitStack() as stack:
            engines = _engines(stack, python, model, SKEW_ENGINES, workdir)
            figures |= overhead(python, router, engines[0], workdir)
            figures |= skew(python, router, engines, workdir)
    return figures
