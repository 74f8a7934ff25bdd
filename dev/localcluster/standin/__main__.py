"""`python -m localcluster.standin MODEL <vllm serve's flags>`: the engine stand-in (see
__init__.py). Exits 1 where vLLM would not start; on SIGTERM drains for `--shutdown-timeout`
seconds, still listening, and exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from aiohttp import web

from . import asgi, startphases
from .api import app
from .config import EngineConfig, StartupError, engine_config
from .engine import INSTANT, Engine, SleepTimes

DEFAULT_TOKEN_S = 0.02
DEFAULT_WARMUP_S = 1.0
# Sleep and wake scaled as the warm-up is: vLLM 0.26's first token 121.4 s after the container's
# start on an H100 is 1 s here; its level-1 sleep took 10.3 s and its wake-up 0.69 s on an H200
# (bench/gpu/h200-2026-11-27-sleep.jsonl).
MEASURED_FIRST_TOKEN_S = 121.4
START_SCALE = DEFAULT_WARMUP_S / MEASURED_FIRST_TOKEN_S
DEFAULT_SLEEP_S = 10.3 * START_SCALE
DEFAULT_WAKE_S = 0.69 * START_SCALE
CLEANUP_S = 2.0  # after the drain: responses being written, idle keep-alive connections

log = logging.getLogger("standin")


def _seconds(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    return float(value) if value else default


async def serve(
    cfg: EngineConfig,
    token_s: float,
    start: startphases.Phases,
    times: SleepTimes = INSTANT,
    started: float | None = None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # vLLM opens its port only once the engine is up: until then a probe's connection is refused.
    began = time.monotonic() if started is None else started
    for name, seconds in start:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        if stop.is_set():
            return 0
        if len(start) > 1:
            log.info(
                "start phase %s over, %.1f s after the process started",
                name,
                time.monotonic() - began,
            )
    engine = Engine(cfg, token_s, times)
    steps = asyncio.create_task(engine.run())
    # A client that goes away cancels its handler, whose requests then leave the engine, as vLLM
    # aborts the requests of a closed connection.
    runner = web.AppRunner(
        app(engine), access_log=None, shutdown_timeout=CLEANUP_S, handler_cancellation=True
    )
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", cfg.host, cfg.port, e)
        await runner.cleanup()
        return 1
    log.info("Starting vLLM API server 0 on http://%s:%d", cfg.host, cfg.port)
    log.info("Application startup complete.")
    await stop.wait()
    # As vLLM 0.32: the HTTP server keeps listening (/health 200) while the engine drains, new
    # generation requests fail (api.py), and the port closes only once the engine has stopped.
    engine.draining = True
    mode = "abort" if cfg.shutdown_timeout == 0 else "drain"
    log.info("[shutdown] API server: stopping engine client mode=%s", mode)
    deadline = time.monotonic() + cfg.shutdown_timeout
    while not engine.sched.idle and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if not engine.sched.idle:
        log.info("[shutdown] aborting %d requests", len(engine.sched.running))
    engine.abort_all()
    log.info("[shutdown] API server: signalling HTTP server shutdown")
    await site.stop()
    await runner.cleanup()
    steps.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await steps
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="(APIServer pid=%(process)d) %(levelname)s %(asctime)s [stand-in] %(message)s",
        stream=sys.stdout,
    )
    started = time.monotonic()
    try:
        cfg = engine_config(sys.argv[1:] if argv is None else argv)
        for path in cfg.middleware:
            asgi.as_aiohttp(asgi.load(path))  # vLLM imports them before it opens the port
    except StartupError as e:
        log.error("%s", e)
        print(f"ValueError: {e}", file=sys.stderr)
        return 1
    log.info(
        "engine stand-in, not vLLM (dev/localcluster/standin): model %s served as %s, "
        "max_num_seqs %d, max_model_len %d, %d KV blocks of %d tokens (%d tokens, %.2f GiB)",
        cfg.model,
        ", ".join(cfg.served_names),
        cfg.max_num_seqs,
        cfg.max_model_len,
        cfg.num_gpu_blocks,
        cfg.block_size,
        cfg.kv_cache_size_tokens,
        cfg.kv_cache_memory_bytes / 1024**3,
    )
    token_s = _seconds("LLMFLEET_STANDIN_TOKEN_S", DEFAULT_TOKEN_S)
    warmup_s = max(0.0, _seconds("LLMFLEET_STANDIN_WARMUP_S", DEFAULT_WARMUP_S))
    try:
        start = startphases.phases(os.environ.get(startphases.PHASES_ENV, ""), warmup_s)
    except ValueError as e:
        log.error("%s", e)
        return 1
    times = SleepTimes(
        sleep_s=max(0.0, _seconds("LLMFLEET_STANDIN_SLEEP_S", DEFAULT_SLEEP_S)),
        wake_s=max(0.0, _seconds("LLMFLEET_STANDIN_WAKE_S", DEFAULT_WAKE_S)),
    )
    start = startphases.remaining(start, time.monotonic() - started)
    return asyncio.run(serve(cfg, token_s, start, times, started))


if __name__ == "__main__":
    sys.exit(main())
