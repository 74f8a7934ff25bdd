"""What the hop reads of a request (its `model`), and the answers it gives itself, shaped as
vLLM's OpenAI server shapes its errors so that clients handle them as they would an engine's."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

# The paths vLLM's OpenAI server reads a `model` from are all POSTs under /v1 (completions, chat,
# embeddings, responses, tokenize, score...). Other requests never name one.
MODEL_PATH_PREFIX = "/v1/"


def requested_model(method: str, path: str, body: bytes) -> str | None:
    """The JSON body's `model`, or None where the request names none (or is not JSON: the engine
    answers that itself)."""
    if method != "POST" or not path.startswith(MODEL_PATH_PREFIX) or body.lstrip()[:1] != b"{":
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    return model if isinstance(model, str) else None


def error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body: dict[str, Any] = {
        "error": {"message": message, "type": kind, "param": "model", "code": status}
    }
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def not_found(model: str) -> web.Response:
    """vLLM's answer to a model it does not serve."""
    return error(404, "NotFoundError", f"The model `{model}` does not exist.")


def unavailable(adapter: str, waited: float, retry_after: int) -> web.Response:
    return error(
        503,
        "ServiceUnavailableError",
        f"The adapter `{adapter}` is loaded on no engine yet (waited {waited:.0f} s for one); "
        f"retry after {retry_after} s. `kubectl get llmdeployment -o yaml` shows status.adapters.",
        {"Retry-After": str(retry_after)},
    )


def lacks_model(status: int, body: bytes, model: str) -> bool:
    """Whether an engine's answer says it does not serve `model` (vLLM's 404), as an engine whose
    mark the hop had not yet seen withdrawn would answer."""
    return status == 404 and f"`{model}` does not exist".encode() in body


def no_room(waited: float, ready_engines: int, retry_after: int) -> web.Response:
    """The answer to a request that waited its whole hold for room on the engines."""
    return error(
        503,
        "ServiceUnavailableError",
        f"No engine had room for this request within {waited:.0f} s ({ready_engines} engines "
        f"Ready, each running as many sequences as it can); retry after {retry_after} s.",
        {"Retry-After": str(retry_after)},
    )


def takes_room(method: str, path: str) -> bool:
    """Whether a request runs on an engine (a generation, an embedding, a score...): the POSTs
    under /v1. /health, /metrics, /v1/models and the like never wait for room."""
    return method == "POST" and path.startswith(MODEL_PATH_PREFIX)
