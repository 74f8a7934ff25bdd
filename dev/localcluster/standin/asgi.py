"""vLLM's `--middleware`: an ASGI middleware class or function, imported by its path and put in
front of the server's routes. The stand-in serves aiohttp, so it runs each one per request
against an ASGI scope of the request, with an inner app that only notes being reached: a
middleware that answers itself (the dev-mode fence's 401) is what the client gets, one that
passes the request on hands it to the stand-in's routes. Middlewares that change requests or
responses on their way through are not modelled."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import MutableMapping
from typing import Any

from aiohttp import web

from .config import StartupError

Message = MutableMapping[str, Any]


def load(path: str) -> Any:
    """The object `path` names, as vLLM imports it; a start failure where vLLM's would fail."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise StartupError(f"--middleware {path}: {e}") from e


def as_aiohttp(middleware: Any) -> Any:
    if not inspect.isclass(middleware):
        # vLLM also takes a function for FastAPI's @app.middleware("http"): not modelled here.
        raise StartupError(f"--middleware {middleware!r}: the stand-in runs ASGI classes only")
    factory: Any = middleware

    @web.middleware
    async def gate(request: web.Request, handler: Any) -> web.StreamResponse:
        reached = False
        start: Message = {}
        body = bytearray()

        async def inner(scope: Message, receive: Any, send: Any) -> None:
            nonlocal reached
            reached = True

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        scope: Message = {
            "type": "http",
            "method": request.method,
            "path": request.path,
            "query_string": request.query_string.encode(),
            "headers": [
                (k.lower().encode("latin-1"), v.encode("latin-1"))
                for k, v in request.headers.items()
            ],
        }
        await factory(inner)(scope, receive, send)
        if reached:
            response: web.StreamResponse = await handler(request)
            return response
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in start.get("headers", [])}
        return web.Response(status=int(start.get("status", 500)), body=bytes(body), headers=headers)

    return gate
