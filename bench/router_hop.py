"""The router hop's cost (llmfleet.routerhop, in the router pod of LLMDeployments with adapters):
what it adds per request over going straight to what it forwards to.

A no-op upstream (an aiohttp server answering a canned completion) stands in for both an engine
and vllm-router; the hop runs as its own process with its engine table preloaded (one engine,
marked as serving the adapter: the pod watch is not in the request path), as it runs in the pod.
The client sends sequential requests on kept-alive connections, alternately straight to the
upstream and through the hop, OVERHEAD_PAIRS pairs per route, and the figure is the per-pair
latency difference (p50, p99), as bench/router.py measures vllm-router's:

* adapter: a request naming the adapter, which the hop sends to the engine itself;
* base: a request naming the base model, which the hop passes to vllm-router (in the pod, the
  router's own overhead, `router_overhead_*`, comes on top).

Upstream, hop and client share the machine's cores, each a process of its own.

    .venv/bin/python -m bench.router_hop    # prints the figures; `make bench BENCH=router_hop`
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

HOST = "127.0.0.1"
OVERHEAD_PAIRS = 2000
WARMUP = 200
ADAPTER, BASE = "sql", "tiny"

UPSTREAM = """
import sys
from aiohttp import web
BODY = (b'{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x",'
        b'"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}')
async def answer(request):
    await request.read()
    return web.Response(body=BODY, content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", answer)
web.run_app(app, host=sys.argv[1], port=int(sys.argv[2]), print=None, access_log=None)
"""

HOP = """
import asyncio, sys
from aiohttp import web
from llmfleet.routerhop.engines import EngineTable
from llmfleet.routerhop.hop import Hop, HopConfig
from llmfleet.routerhop.passthrough import upstream_session
host, port, upstream = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    table = EngineTable()
    mark = {"type": "llmfleet.dev/adapters-serving", "status": "True", "message": "sql"}
    ready = {"type": "Ready", "status": "True"}
    status = {"phase": "Running", "podIP": host, "conditions": [ready, mark]}
    table.replace([{"metadata": {"name": "e"}, "status": status}])
    config = HopConfig(frozenset({"tiny"}), frozenset({"sql"}), f"http://{host}:{upstream}",
                       f"http://{host}:{upstream}/metrics", upstream, 5.0, 5)
    async with upstream_session() as session:
        runner = web.AppRunner(Hop(config, table, session).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
asyncio.run(main())
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


@contextmanager
def _serve(code: str, *args: object) -> Iterator[int]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-c", code, HOST, str(port), *map(str, args)])
    try:
        _wait(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def _timed(conn: http.client.HTTPConnection, body: bytes) -> float:
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    elapsed = time.perf_counter() - start
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}")
    return elapsed


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    value: float = ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
    return value


def overhead(upstream: int, hop: int, model: str) -> list[float]:
    body = json.dumps({"model": model, "prompt": "hello there", "max_tokens": 1}).encode()
    direct = http.client.HTTPConnection(HOST, upstream)
    via = http.client.HTTPConnection(HOST, hop)
    for _ in range(WARMUP):
        _timed(direct, body)
        _timed(via, body)
    return [_timed(via, body) - _timed(direct, body) for _ in range(OVERHEAD_PAIRS)]


def run() -> dict[str, float]:
    with _serve(UPSTREAM) as upstream, _serve(HOP, upstream) as hop:
        adapter = overhead(upstream, hop, ADAPTER)
        base = overhead(upstream, hop, BASE)
    return {
        "router_hop_adapter_overhead_p50_ms": 1000 * _quantile(adapter, 0.5),
        "router_hop_adapter_overhead_p99_ms": 1000 * _quantile(adapter, 0.99),
        "router_hop_base_overhead_p50_ms": 1000 * _quantile(base, 0.5),
        "router_hop_base_overhead_p99_ms": 1000 * _quantile(base, 0.99),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
