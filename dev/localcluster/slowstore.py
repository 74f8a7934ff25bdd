"""A deliberately slow S3 API for the lab: one adapter under one prefix, whose weights it sends a
few bytes at a time, so that a test can hold an adapter fetch in flight for minutes (the
operator's reconcile waiting on it) and do something meanwhile, e.g. restart the operator.

Only what the adapter fetcher's boto3 client asks for, path-style (llmfleet.fetcher.objectstore):
ListObjectsV2 of the bucket and GetObject of a key; every other request is a NoSuchKey. Requests
are not authenticated (any signature passes): what is slow here is the transfer, not the keys.
The weights' answer announces their whole length and trickles them, each piece well inside the
client's read timeout (60 s), so the client keeps waiting rather than retrying; stopping the
store ends the answers in flight (their connections close short)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
# A PEFT LoRA config; the fetcher checks only that the file is there.
ADAPTER_CONFIG = json.dumps(
    {
        "peft_type": "LORA",
        "r": 8,
        "lora_alpha": 16,
        "target_modules": ["q_proj", "v_proj"],
    }
).encode()


@dataclass
class SlowStore:
    """The store's address and what it serves: `source` is the adapter's s3:// URI."""

    endpoint: str
    bucket: str
    prefix: str  # ends with "/"
    weights_bytes: int
    piece_bytes: int
    piece_seconds: float
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sending: int = 0
    _begun: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def source(self) -> str:
        return f"s3://{self.bucket}/{self.prefix.rstrip('/')}"

    def weights_in_flight(self) -> int:
        """Answers with the weights begun and not yet ended."""
        with self._lock:
            return self._sending

    def weights_begun(self) -> int:
        """Answers with the weights begun since the store started."""
        with self._lock:
            return self._begun

    def stop(self) -> None:
        """Cut the answers in flight short (their clients see the connection close early) and
        every later one; the server itself stops when its context exits."""
        self.stopped.set()

    def objects(self) -> dict[str, int]:
        return {CONFIG: len(ADAPTER_CONFIG), WEIGHTS: self.weights_bytes}

    def send_weights(self, write: Callable[[bytes], None]) -> None:
        """Sends the weights through `write` a piece at a time; ends early when the store stops
        or the client goes away."""
        with self._lock:
            self._sending += 1
            self._begun += 1
        try:
            left = self.weights_bytes
            while left > 0 and not self.stopped.is_set():
                n = min(self.piece_bytes, left)
                try:
                    write(b"\0" * n)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the fetcher gave up (or was stopped): nobody to send to
                left -= n
                if left:
                    self.stopped.wait(self.piece_seconds)
        finally:
            with self._lock:
                self._sending -= 1


def _listing(store: SlowStore, prefix: str) -> bytes:
    items = "".join(
        f"<Contents><Key>{store.prefix}{name}</Key>"
        "<LastModified>2026-01-01T00:00:00.000Z</LastModified>"
        f'<ETag>"{name}"</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass>'
        "</Contents>"
        for name, size in store.objects().items()
        if f"{store.prefix}{name}".startswith(prefix)
    )
    count = items.count("<Contents>")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{store.bucket}</Name><Prefix>{prefix}</Prefix><KeyCount>{count}</KeyCount>"
        f"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>{items}</ListBucketResult>"
    ).encode()


def _handler(store: SlowStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            bucket, _, key = unquote(url.path).lstrip("/").partition("/")
            query = parse_qs(url.query)
            if bucket == store.bucket and not key and query.get("list-type") == ["2"]:
                self._answer(
                    200,
                    "application/xml",
                    _listing(store, query.get("prefix", [""])[0]),
                )
            elif bucket == store.bucket and key == store.prefix + CONFIG:
                self._answer(200, "application/json", ADAPTER_CONFIG)
            elif bucket == store.bucket and key == store.prefix + WEIGHTS:
                self._head(200, "application/octet-stream", store.weights_bytes)
                store.send_weights(self._write)
            else:
                body = b"<Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>"
                self._answer(404, "application/xml", body)

        def _head(self, status: int, content_type: str, length: int) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(length))
            self.end_headers()

        def _answer(self, status: int, content_type: str, body: bytes) -> None:
            self._head(status, content_type, len(body))
            self._write(body)

        def _write(self, data: bytes) -> None:
            self.wfile.write(data)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests' output is not the place for every request

    return Handler


@contextmanager
def slow_store(
    bucket: str = "slow",
    prefix: str = "adapters/slow/",
    weights_bytes: int = 64 << 10,
    piece_bytes: int = 128,
    piece_seconds: float = 1.0,
) -> Iterator[SlowStore]:
    """The store on a free loopback port; by default its weights take 512 s to send. Stopped
    (answers in flight cut short) on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    port = int(server.socket.getsockname()[1])
    store = SlowStore(
        endpoint=f"http://127.0.0.1:{port}",
        bucket=bucket,
        prefix=prefix if prefix.endswith("/") else prefix + "/",
        weights_bytes=weights_bytes,
        piece_bytes=piece_bytes,
        piece_seconds=piece_seconds,
    )
    server.RequestHandlerClass = _handler(store)
    thread = threading.Thread(target=server.serve_forever, name="slow-store", daemon=True)
    thread.start()
    try:
        yield store
    finally:
        store.stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        deadline = time.monotonic() + 5
        while store.weights_in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
