"""`llmfleet fetch-adapters`: the adapter fetcher, the second container of every LoRA engine pod
(run from the operator's image), which copies adapters from object stores and Hub revisions
into the folder it shares with the engine, when the operator asks (llmfleet.fetcher.server).

    llmfleet fetch-adapters [--host H] [--port 8081] [--dir /var/lib/llmfleet/adapters]
                            [--s3-endpoint URL] [--s3-region R]
                            [--gs-endpoint https://storage.googleapis.com] [--max-bytes N]
                            [--max-adapters N] [--max-total-bytes N]

Fetching and pruning answer only the operator: the container's LLMFLEET_FETCHER_TOKEN holds the
bearer token it sends (render.fetcher gives it from the LLMDeployment's fetcher Secret), and the
fetcher does not start without one.

Credentials come from the container's environment: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (or IRSA's web identity on EKS) for s3://, GCS HMAC keys in the same two
variables for gs:// (Workload Identity without HMAC keys is not supported), HF_TOKEN for gated
and private Hub repos, HF_ENDPOINT for a Hub mirror. It logs one line per fetch to stderr
(source, bytes, seconds), never a credential."""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

from llmfleet.fetcher.objectstore import DEFAULT_GS_ENDPOINT
from llmfleet.fetcher.paths import FETCH_ROOT, FETCHER_PORT, TOKEN_ENV
from llmfleet.fetcher.store import DEFAULT_MAX_BYTES, Limits


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "fetch-adapters",
        help="serve the adapter fetcher (the LoRA engine pod's second container): copies "
        "adapters from s3://, gs:// and Hub revisions into the folder shared with the engine",
    )
    p.add_argument(
        "--host",
        default="0.0.0.0",
        help="address to listen on; the operator calls the pod's IP (default %(default)s)",
    )
    p.add_argument("--port", type=int, default=FETCHER_PORT, help="port (default %(default)s)")
    p.add_argument(
        "--dir",
        type=Path,
        default=Path(FETCH_ROOT),
        help="folder the adapters are fetched into, shared with the engine (default %(default)s)",
    )
    p.add_argument(
        "--s3-endpoint",
        type=_url,
        default=None,
        help="S3-compatible store for s3:// (MinIO, Ceph, R2...; path-style requests); "
        "default: AWS S3",
    )
    p.add_argument("--s3-region", default=None, help="region of s3:// buckets (default: AWS's)")
    p.add_argument(
        "--gs-endpoint",
        type=_url,
        default=DEFAULT_GS_ENDPOINT,
        help="GCS XML API endpoint for gs:// (default %(default)s)",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive,
        default=DEFAULT_MAX_BYTES,
        help="largest adapter fetched, all its files together (default %(default)s: 8 GiB)",
    )
    p.add_argument(
        "--max-adapters",
        type=_positive,
        default=None,
        help="most adapters kept at once; a fetch beyond it is refused (507) (default: no cap)",
    )
    p.add_argument(
        "--max-total-bytes",
        type=_positive,
        default=None,
        help="most bytes of all adapters kept and being fetched together, within the volume's "
        "sizeLimit; a fetch beyond it is refused (507) (default: no cap)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default %(default)s)",
    )
    p.set_defaults(func=_run)


def _url(text: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise argparse.ArgumentTypeError(f"not an http:// or https:// URL: {text!r}")
    return text.rstrip("/")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive number of bytes: {text!r}")
    return value


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # At DEBUG these log every request's headers, signatures and tokens included.
    for noisy in ("boto3", "botocore", "s3transfer", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from llmfleet.fetcher.server import serve

    if not os.environ.get(TOKEN_ENV, "").strip():
        raise SystemExit(
            f"llmfleet fetch-adapters: {TOKEN_ENV} is empty: the fetcher answers only a caller "
            "that sends this token, and does not start without one"
        )
    serve(
        args.host,
        args.port,
        args.dir,
        s3_endpoint=args.s3_endpoint,
        s3_region=args.s3_region,
        gs_endpoint=args.gs_endpoint,
        limits=Limits(args.max_bytes, args.max_adapters, args.max_total_bytes),
    )
    return 0
