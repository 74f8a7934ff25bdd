"""The JSON bodies of vLLM 0.32's OpenAI server, key for key (values made up where they would
come from a model): what tests/e2e/test_engine_standin_contract.py compares with the real one."""

from __future__ import annotations

import json
import uuid
from typing import Any

from .config import EngineConfig
from .engine import Token

VERSION = "0.32.0"
FINGERPRINT = f"vllm-{VERSION}-stand-in"


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def error(status: int, message: str, param: str | None) -> dict[str, Any]:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def models(cfg: EngineConfig, created: int) -> dict[str, Any]:
    permission = {
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": cfg.model,
            "parent": None,
            "max_model_len": cfg.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex[:16]}", **permission}],
        }
        for name in cfg.served_names
    ]
    return {"object": "list", "data": data}


def head(chat: bool, created: int, model: str) -> dict[str, Any]:
    """What every body and chunk of one response starts with."""
    kind = "chat.completion" if chat else "text_completion"
    prefix = "chatcmpl" if chat else "cmpl"
    return {"id": f"{prefix}-{uuid.uuid4().hex[:16]}", "object": kind, "created": created} | {
        "model": model
    }


def chunk_object(head: dict[str, Any]) -> str:
    """A stream chunk's `object`: vLLM's chat chunks say so, its completion chunks do not."""
    kind = str(head["object"])
    return f"{kind}.chunk" if kind == "chat.completion" else kind


def body(
    head: dict[str, Any], texts: list[str], finish: list[str | None], usage: dict[str, int]
) -> dict[str, Any]:
    chat = head["object"] == "chat.completion"
    choices = [choice(i, t, f, chat) for i, (t, f) in enumerate(zip(texts, finish, strict=True))]
    prompt = {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
    return {
        **head,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": {**usage, "prompt_tokens_details": None, "completion_tokens_details": None},
        **(prompt if chat else {}),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def choice(index: int, text: str, finish: str | None, chat: bool) -> dict[str, Any]:
    common = {"logprobs": None, "finish_reason": finish, "stop_reason": None, "token_ids": None}
    if chat:
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": None}
        message |= {"audio": None, "function_call": None, "reasoning": None}
        return {"index": index, "message": message, **common, "routed_experts": None}
    extra = {"prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}
    return {"index": index, "text": text, **common, **extra}


def role_chunk(head: dict[str, Any], index: int) -> dict[str, Any]:
    """A chat stream's first chunk per choice: the role, no content yet."""
    delta = {"role": "assistant", "content": ""}
    first = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
    chunk = {**head, "object": chunk_object(head), "choices": [first]}
    return chunk | {"prompt_token_ids": None, "prompt_text": None}


def token_chunk(head: dict[str, Any], token: Token, usage_follows: bool) -> dict[str, Any]:
    """One token's chunk; the last one says the finish reason, and carries the fingerprint
    unless a usage chunk follows (which then does)."""
    last = token.finish_reason is not None
    common: dict[str, Any] = {"logprobs": None, "finish_reason": token.finish_reason}
    if head["object"] == "chat.completion":
        if last:
            common["stop_reason"] = None
        delta = {"content": token.text}
        one = {"index": token.index, "delta": delta, **common, "token_ids": None}
    else:
        one = {"index": token.index, "text": token.text, **common, "stop_reason": None}
        one |= {"prompt_token_ids": None, "token_ids": None}
    chunk = {**head, "object": chunk_object(head), "choices": [one]}
    if last and not usage_follows:
        chunk["system_fingerprint"] = FINGERPRINT
    return chunk


def usage_chunk(head: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    """The last chunk before [DONE] when stream_options.include_usage is set."""
    return {**head, "object": chunk_object(head), "choices": [], "usage": usage} | {
        "system_fingerprint": FINGERPRINT
    }
