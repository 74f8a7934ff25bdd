"""Input lines (OpenAI Batch API requests) and output records (OpenAI batch output format).

Pure: parsing, validation, sampling parameters and response bodies, no engine and no I/O.
An input line is `{"custom_id", "method": "POST", "url", "body"}`; an output record is
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`. Record ids are
`batch_req_<line number>`, so a restarted shard knows which lines it has answered even when a
line had no readable custom_id.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Url = Literal["/v1/chat/completions", "/v1/completions"]
CHAT_URL: Url = "/v1/chat/completions"
COMPLETIONS_URL: Url = "/v1/completions"
URLS: tuple[Url, ...] = (CHAT_URL, COMPLETIONS_URL)
RECORD_ID_PREFIX = "batch_req_"
# OpenAI's default for /v1/completions; chat completions default to the rest of the context.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16

# Error codes of error records.
INVALID_JSON = "invalid_json"
INVALID_REQUEST = "invalid_request"
DUPLICATE_CUSTOM_ID = "duplicate_custom_id"
ENGINE_ERROR = "engine_error"
RETRIES_EXHAUSTED = "retries_exhausted"

# Request body fields mapped onto vLLM SamplingParams, with the parameter name they set. Fields
# not listed (model, stream, user, ...) are accepted and ignored, as a batch has no use for them.
_SAMPLING_FIELDS: Mapping[str, str] = {
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "n": "n",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "ignore_eos": "ignore_eos",
    "min_tokens": "min_tokens",
}


@dataclass(frozen=True)
class Request:
    """One valid input line."""

    line: int  # 1-based line number in the input file
    custom_id: str
    url: Url
    body: Mapping[str, Any]


@dataclass(frozen=True)
class LineError:
    """An input line that cannot be run; it gets an error record naming the line."""

    line: int
    custom_id: str | None
    code: str
    message: str  # starts with "line N: "


@dataclass(frozen=True)
class Choice:
    text: str
    finish_reason: str | None


@dataclass(frozen=True)
class Completion:
    """What the engine produced for one request."""

    prompt_tokens: int
    choices: tuple[Choice, ...]
    completion_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))


def _error(line: int, custom_id: str | None, code: str, what: str) -> LineError:
    return LineError(line, custom_id, code, f"line {line}: {what}")


def parse_line(line: int, raw: str | bytes) -> Request | LineError:
    """Validate one non-blank input line."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return _error(line, None, INVALID_JSON, f"not valid JSON ({e})")
    if not isinstance(obj, dict):
        return _error(line, None, INVALID_REQUEST, "not a JSON object")
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _error(line, None, INVALID_REQUEST, "custom_id must be a non-empty string")
    method = obj.get("method", "POST")
    if method != "POST":
        return _error(line, custom_id, INVALID_REQUEST, f"method must be POST, not {method!r}")
    url = obj.get("url")
    if url not in URLS:
        return _error(
            line,
            custom_id,
            INVALID_REQUEST,
            f"unknown url {url!r}; use {CHAT_URL} or {COMPLETIONS_URL}",
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        return _error(line, custom_id, INVALID_REQUEST, "body is missing or not an object")
    problem = _body_problem(url, body)
    if problem:
        return _error(line, custom_id, INVALID_REQUEST, problem)
    return Request(line=line, custom_id=custom_id, url=url, body=body)


def _body_problem(url: str, body: Mapping[str, Any]) -> str | None:
    if url == CHAT_URL:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "body.messages must be a non-empty list of messages"
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            return "each of body.messages must be an object with a role"
        return None
    prompt = body.get("prompt")
    if isinstance(prompt, str) or _token_ids(prompt):
        return None
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return None
    return "body.prompt must be a string or a list of token ids (one prompt per line)"


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) for t in value)


def prompt_of(request: Request) -> str | list[int]:
    """The completion prompt of a /v1/completions request: text or token ids."""
    prompt = request.body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return str(prompt[0])
    if isinstance(prompt, str):
        return prompt
    return [int(t) for t in prompt]


def custom_id_of(raw: str | bytes) -> str | None:
    """The custom_id of a line, or None when the line has none (it is then an error anyway)."""
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    custom_id = obj.get("custom_id")
    return custom_id if isinstance(custom_id, str) and custom_id else None


def duplicate_error(line: int, custom_id: str, first_line: int) -> LineError:
    return _error(
        line,
        custom_id,
        DUPLICATE_CUSTOM_ID,
        f"duplicate custom_id {custom_id!r} (first on line {first_line})",
    )


def sampling_kwargs(request: Request, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of vLLM's SamplingParams: the body's fields, else the job's defaults."""
    out: dict[str, Any] = {}
    for source in (defaults, request.body):
        for name, param in _SAMPLING_FIELDS.items():
            value = source.get(name)
            if value is not None:
                out[param] = value
    if request.url == COMPLETIONS_URL:
        out.setdefault("max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS)
    if isinstance(out.get("stop"), str):
        out["stop"] = [out["stop"]]
    return out


def record_id(line: int) -> str:
    return f"{RECORD_ID_PREFIX}{line}"


def line_of_record(record: Mapping[str, Any]) -> int | None:
    """The input line number a record answers, from its id."""
    rid = record.get("id")
    if not isinstance(rid, str) or not rid.startswith(RECORD_ID_PREFIX):
        return None
    tail = rid[len(RECORD_ID_PREFIX) :]
    return int(tail) if tail.isdigit() else None


def response_body(request: Request, completion: Completion, model: str) -> dict[str, Any]:
    """The OpenAI response body (chat.completion or text_completion) incl. usage."""
    usage = {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }
    choices: list[dict[str, Any]]
    if request.url == CHAT_URL:
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "logprobs": None,
                "finish_reason": c.finish_reason,
            }
            for i, c in enumerate(completion.choices)
        ]
        obj, prefix = "chat.completion", "chatcmpl"
    else:
        choices = [
            {"index": i, "text": c.text, "logprobs": None, "finish_reason": c.finish_reason}
            for i, c in enumerate(completion.choices)
        ]
        obj, prefix = "text_completion", "cmpl"
    return {
        "id": f"{prefix}-{request_id(request)}",
        "object": obj,
        "created": completion.created,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def request_id(request: Request) -> str:
    return f"req-{request.line}"


def success_record(request: Request, completion: Completion, model: str) -> dict[str, Any]:
    return {
        "id": record_id(request.line),
        "custom_id": request.custom_id,
        "response": {
            "status_code": 200,
            "request_id": request_id(request),
            "body": response_body(request, completion, model),
        },
        "error": None,
    }


def error_record(error: LineError) -> dict[str, Any]:
    return {
        "id": record_id(error.line),
        "custom_id": error.custom_id,
        "response": None,
        "error": {"code": error.code, "message": error.message, "line": error.line},
    }


def encode(record: Mapping[str, Any]) -> bytes:
    """One output line: compact JSON and a newline, written with a single write()."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
