"""`python -m llmfleet.routerhop`: the router hop, the second container of every router pod
(render.routerhop writes its arguments).

    python -m llmfleet.routerhop --namespace NS --selector K=V [K=V...] --base-model NAME
        --router-port 8001 --router-metrics-port 29001 --slots-per-engine N
        [--queue-per-engine N] [--routers N] [--admit-seconds S] [--host 0.0.0.0] [--port 8000]
        [--metrics-port 29000] [--upstream-host 127.0.0.1] [--engine-port 8000]
        [--hold-seconds 120] [--service-account-dir DIR]

The adapters come from LLMFLEET_ADAPTERS (comma-separated): an edit of spec.adapters rolls the
router pods, never an engine."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from .admission import Room
from .engines import EngineTable
from .hop import Hop, HopConfig
from .passthrough import upstream_session
from .podwatch import SERVICE_ACCOUNT_DIR, ApiAccess, PodWatch

ADAPTERS_ENV = "LLMFLEET_ADAPTERS"
RETRY_AFTER_SECONDS = 5
# Inside the router pod's termination grace (30 s) after its preStop sleep (5 s).
DRAIN_SECONDS = 20.0


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m llmfleet.routerhop", description=__doc__)
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="the router Service's port")
    p.add_argument("--metrics-port", type=int, default=29000, help="Prometheus text, /healthz")
    p.add_argument("--upstream-host", default="127.0.0.1", help="where vllm-router listens")
    p.add_argument("--router-port", type=int, required=True, help="vllm-router's port")
    p.add_argument("--router-metrics-port", type=int, required=True, help="vllm-router's metrics")
    p.add_argument("--engine-port", type=int, default=8000, help="the engines' OpenAI port")
    p.add_argument("--namespace", required=True, help="the engines' namespace")
    p.add_argument("--selector", nargs="+", required=True, metavar="K=V", help="engine labels")
    p.add_argument(
        "--base-model", action="append", required=True, help="a name the base is served under"
    )
    p.add_argument(
        "--hold-seconds",
        type=float,
        default=120.0,
        help="how long a request for an adapter waits for an engine serving it, then 503",
    )
    p.add_argument(
        "--slots-per-engine",
        type=int,
        required=True,
        help="sequences one engine runs at once (the plan's max concurrent sequences)",
    )
    p.add_argument(
        "--queue-per-engine",
        type=int,
        default=0,
        help="requests one engine may queue on its own beyond its slots (default %(default)s)",
    )
    p.add_argument(
        "--routers", type=int, default=1, help="router pods sharing the engines (default 1)"
    )
    p.add_argument(
        "--admit-seconds",
        type=float,
        default=120.0,
        help="how long a request waits for room on the engines, then 503",
    )
    p.add_argument("--service-account-dir", type=Path, default=SERVICE_ACCOUNT_DIR)
    args = p.parse_args(argv)
    for name, least in (("slots_per_engine", 1), ("routers", 1), ("queue_per_engine", 0)):
        if getattr(args, name) < least:
            flag = "--" + name.replace("_", "-")
            p.error(f"{flag}: {getattr(args, name)} is below {least}")
    for label in args.selector:
        if "=" not in label:
            p.error(f"--selector: {label!r} is not KEY=VALUE")
    return args


def config_of(args: argparse.Namespace, adapters: str) -> HopConfig:
    router = f"http://{args.upstream_host}:{args.router_port}"
    return HopConfig(
        base_models=frozenset(args.base_model),
        adapters=frozenset(a for a in adapters.split(",") if a),
        router_url=router,
        router_metrics_url=f"http://{args.upstream_host}:{args.router_metrics_port}/metrics",
        engine_port=args.engine_port,
        hold_seconds=args.hold_seconds,
        retry_after_seconds=RETRY_AFTER_SECONDS,
        room=Room(args.slots_per_engine, args.queue_per_engine, args.routers),
        admit_seconds=args.admit_seconds,
    )


async def serve(args: argparse.Namespace, config: HopConfig) -> None:
    table = EngineTable()
    async with upstream_session() as session:
        hop = Hop(config, table, session)
        watch = PodWatch(
            table,
            ApiAccess.in_cluster(args.service_account_dir),
            args.namespace,
            ",".join(args.selector),
            session,
        )
        runners = [
            hop.runner(DRAIN_SECONDS),
            web.AppRunner(hop.metrics_app(), access_log=None),
        ]
        for runner, port in zip(runners, (args.port, args.metrics_port), strict=True):
            await runner.setup()
            await web.TCPSite(runner, args.host, port).start()
        logging.getLogger(__name__).info(
            "router hop on %s:%d: room per Ready engine %d / %d routers; adapters %s -> "
            "marked engines, the rest -> %s",
            args.host,
            args.port,
            config.room.slots_per_engine + config.room.queue_per_engine,
            config.room.routers,
            ",".join(sorted(config.adapters)) or "(none)",
            config.router_url,
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        watching = asyncio.create_task(watch.run())
        try:
            await stop.wait()
        finally:
            # Stop taking connections, let the requests in flight finish (streams included),
            # within the pod's termination grace; then the pods stop mattering.
            for runner in runners:
                await runner.cleanup()
            watching.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse(argv)
    asyncio.run(serve(args, config_of(args, os.environ.get(ADAPTERS_ENV, ""))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
