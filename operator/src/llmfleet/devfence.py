"""The fence around vLLM's dev-mode endpoints on a standby engine's port (docs/security.md).

VLLM_SERVER_DEV_MODE=1, which sleep mode needs, also opens /collective_rpc (code in the
engine), /server_info, /pause and more on the OpenAI port, and vLLM's --api-key guards none of
them. Standby engines run vLLM with `--middleware llmfleet_devfence.DevModeFence`: every path
outside those vLLM serves without dev mode then needs `Authorization: Bearer <token>`, the token
the operator derives for this LLMDeployment (a Secret, read by the engine container only).

This file is copied verbatim into the engine pod (a ConfigMap on PYTHONPATH, render/standby.py):
the engine image is vLLM's, which has no llmfleet. So it imports the standard library only.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

# The module name inside the engine pod, and the variable that holds the operator's token.
MODULE = "llmfleet_devfence"
TOKEN_ENV = "LLMFLEET_DEV_TOKEN"
# What vLLM serves without VLLM_SERVER_DEV_MODE: whole paths, and prefixes of API families.
OPEN_PATHS = frozenset(
    {
        "/health",
        "/ping",
        "/metrics",
        "/version",
        "/load",
        "/tokenize",
        "/detokenize",
        "/invocations",
        "/pooling",
        "/score",
        "/rerank",
    }
)
OPEN_PREFIXES = ("/v1/", "/v2/", "/inference/", "/cohere/")
UNAUTHORIZED = b'{"error":"Unauthorized"}'  # vLLM's own 401 body for a missing API key

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_open(path: str) -> bool:
    """A path vLLM serves without dev mode: left to vLLM (and its --api-key, on /v1)."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def admits(path: str, authorization: str, token: str) -> bool:
    """Whether the fence lets a request through. Without a token every fenced path is refused:
    a pod whose Secret is missing must not fall open."""
    if is_open(path):
        return True
    scheme, _, given = authorization.partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.encode(), token.encode())


class DevModeFence:
    """ASGI middleware (vLLM adds a class given to --middleware with app.add_middleware)."""

    def __init__(self, app: Asgi) -> None:
        self.app = app
        self.token = os.environ.get(TOKEN_ENV, "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if admits(str(scope.get("path", "")), authorization, self.token):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": UNAUTHORIZED})
