"""The stand-in's HTTP routes: vLLM 0.32's OpenAI server as a client sees it (routes, status
codes, errors, SSE streams; bodies in shapes.py), on aiohttp."""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from . import asgi, shapes
from .engine import Engine, Token
from .metrics import render

GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")  # vLLM's AuthenticationMiddleware
DEFAULT_COMPLETION_TOKENS = 16
# prometheus_client 0.26's text format (the 0.0.4 format, under its 1.0.0 name), what vLLM
# answers whatever the client accepts.
METRICS_CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
# What vLLM 0.32 answers (500) to a generation request while it drains after SIGTERM: its
# tokenizer's thread pool is already shut down.
DRAINING_MESSAGE = "cannot schedule new futures after shutdown"
# vLLM 0.32's PauseMode: what /sleep does with the requests in flight.
PAUSE_MODES = ("abort", "wait", "keep")
# The stand-in's own refusal without --enable-sleep-mode (what vLLM does then is not modelled).
SLEEP_MODE_OFF = "Sleep mode is not enabled. Start the engine with --enable-sleep-mode."
_WORD = re.compile(r"\w+|[^\w\s]")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def respond(data: Any, status: int = 200) -> web.Response:
    """JSON as vLLM's server sends it: compact, `application/json` without a charset."""
    body = shapes.dumps(data).encode()
    return web.Response(body=body, status=status, headers={"Content-Type": "application/json"})


def count_tokens(prompt: Any) -> int:
    """A prompt's length in tokens, estimated (no tokenizer): words and punctuation, plus BOS."""
    if isinstance(prompt, list):
        return len(prompt)  # token ids
    return 1 + len(_WORD.findall(str(prompt)))


def chat_tokens(messages: list[Any]) -> int:
    """The tiny model's chat template: BOS, `<|im_start|>role\\n...<|im_end|>\\n` per message,
    and the assistant's turn."""
    contents = (str(m.get("content") or "") if isinstance(m, dict) else "" for m in messages)
    return 4 + sum(5 + count_tokens(c) for c in contents)


def check_length(max_model_len: int, prompt_tokens: int, max_tokens: int) -> None:
    if max_tokens > max_model_len:
        raise ApiError(
            400,
            f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            f"Please request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "max_tokens",
        )
    if prompt_tokens + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {max_tokens} output tokens and your prompt contains at least "
            f"{prompt_tokens} input tokens, for a total of at least "
            f"{prompt_tokens + max_tokens} tokens. Please reduce the length of the input prompt "
            "or the number of requested output tokens.",
            "input_tokens",
        )


async def _send(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(b"data: " + shapes.dumps(data).encode() + b"\n\n")


class Api:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        self.created = int(time.time())

    @web.middleware
    async def vllm_like(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """vLLM's API key check on /v1, its error bodies, FastAPI's 404 and 405."""
        keys = self.cfg.api_keys
        if keys and request.method != "OPTIONS" and request.path.startswith(GUARDED_PREFIX):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not any(
                secrets.compare_digest(token, k) for k in keys
            ):
                return respond({"error": "Unauthorized"}, status=401)
        try:
            return await handler(request)
        except ApiError as e:
            return respond(shapes.error(e.status, e.message, e.param), status=e.status)
        except web.HTTPMethodNotAllowed:
            return respond({"detail": "Method Not Allowed"}, status=405)
        except web.HTTPNotFound:
            return respond({"detail": "Not Found"}, status=404)

    async def empty(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, _: web.Request) -> web.Response:
        return respond(shapes.models(self.cfg, self.created))

    async def metrics(self, _: web.Request) -> web.Response:
        body = render(self.cfg, self.engine.sched, self.engine.stats).encode()
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def version(self, _: web.Request) -> web.Response:
        return respond({"version": shapes.VERSION})

    async def load(self, _: web.Request) -> web.Response:
        sched = self.engine.sched
        return respond({"server_load": len(sched.running) + len(sched.waiting)})

    async def sleep(self, request: web.Request) -> web.Response:
        level = _query_int(request, "level", 1, 0, 2)
        mode = request.query.get("mode", "abort")
        if mode not in PAUSE_MODES:
            raise ApiError(400, f"mode: Input should be {_one_of(PAUSE_MODES)}", "mode")
        if not self.cfg.enable_sleep_mode:
            raise ApiError(500, SLEEP_MODE_OFF)
        await self.engine.sleep(level, mode)
        return web.Response(status=200)  # vLLM 0.26 on an H200: 200, empty body

    async def wake_up(self, request: web.Request) -> web.Response:
        await self.engine.wake_up()
        return web.Response(status=200)  # as /sleep: 200, empty body

    async def is_sleeping(self, _: web.Request) -> web.Response:
        return respond({"is_sleeping": self.engine.sleeping})

    async def collective_rpc(self, request: web.Request) -> web.Response:
        # The stand-in has no workers: every method is one the workers lack, as vLLM answers
        # for a method its workers do not implement.
        body = await request.json() if request.can_read_body else {}
        method = str((body or {}).get("method", ""))
        raise ApiError(
            500,
            f"Call to collective_rpc method failed: Method {method!r} is not implemented.",
        )

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        return respond({"success": True})

    async def server_info(self, _: web.Request) -> web.Response:
        return respond({"vllm_config": f"model={self.cfg.model!r}"})

    async def pause(self, _: web.Request) -> web.Response:
        self.engine.pause()
        return respond({"status": "paused"})

    async def is_paused(self, _: web.Request) -> web.Response:
        return respond({"is_paused": self.engine.paused})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            prompts = [count_tokens(p) for p in prompt]
        else:
            prompts = [count_tokens(prompt)]
        max_tokens = int(body.get("max_tokens") or DEFAULT_COMPLETION_TOKENS)
        return await self._generate(request, body, prompts, max_tokens, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        prompt = chat_tokens(list(body.get("messages") or []))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        default = self.cfg.max_model_len - prompt
        return await self._generate(request, body, [prompt], int(max_tokens or default), chat=True)

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as e:
            raise ApiError(400, f"JSON decode error: {e}") from e
        if not isinstance(body, dict):
            raise ApiError(400, "Input should be a valid dictionary")
        model = body.get("model")
        if model is not None and model not in self.cfg.served_names:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")
        if self.engine.draining:
            raise ApiError(500, DRAINING_MESSAGE)
        return body

    async def _generate(
        self,
        request: web.Request,
        body: dict[str, Any],
        prompts: list[int],
        max_tokens: int,
        chat: bool,
    ) -> web.StreamResponse:
        n = int(body.get("n") or 1)
        for p in prompts:
            check_length(self.cfg.max_model_len, p, max_tokens)
        engine = self.engine
        engine.stats.request(n, max_tokens)
        out: asyncio.Queue[Token] = asyncio.Queue()
        seqs = [
            engine.submit(p, max_tokens, out, i * n + j)
            for i, p in enumerate(prompts)
            for j in range(n)
        ]
        head = shapes.head(chat, int(time.time()), str(body.get("model") or self.cfg.model_name))
        texts = [""] * len(seqs)
        finish: list[str | None] = [None] * len(seqs)
        response: web.StreamResponse | None = None
        usage_chunk = bool((body.get("stream_options") or {}).get("include_usage"))
        try:
            if body.get("stream"):
                response = web.StreamResponse(
                    headers={"Content-Type": "text/event-stream; charset=utf-8"}
                )
                response.enable_chunked_encoding()
                await response.prepare(request)
                for i in range(len(seqs) if chat else 0):
                    await _send(response, shapes.role_chunk(head, i))
            while any(f is None for f in finish):
                token = await out.get()
                texts[token.index] += token.text
                finish[token.index] = token.finish_reason
                if response is not None:
                    await _send(response, shapes.token_chunk(head, token, usage_chunk))
        except ConnectionResetError:  # the client closed a stream: nobody to answer
            return response or web.Response(status=499)
        finally:
            for seq in seqs:
                engine.abort(seq)  # a client gone mid-request: its sequences leave the engine
        generated = sum(s.generated for s in seqs)
        usage = {
            "prompt_tokens": sum(prompts),
            "total_tokens": sum(prompts) + generated,
            "completion_tokens": generated,
        }
        if response is None:
            return respond(shapes.body(head, texts, finish, usage))
        if usage_chunk:
            await _send(response, shapes.usage_chunk(head, usage))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _query_int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """FastAPI's `Annotated[int, Query(ge=low, le=high)]`, with vLLM's 400 for a bad value."""
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name}: Input should be a valid integer", name) from None
    if not low <= value <= high:
        raise ApiError(400, f"{name}: Input should be between {low} and {high}", name)
    return value


def _one_of(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values[:-1]) + f" or '{values[-1]}'"


def app(engine: Engine) -> web.Application:
    api = Api(engine)
    # vLLM adds --middleware last, so it runs first: before the API key check and the routes.
    fences = [asgi.as_aiohttp(asgi.load(path)) for path in engine.cfg.middleware]
    application = web.Application(middlewares=[*fences, api.vllm_like])
    if engine.cfg.dev_mode:
        # vLLM registers its dev routers only under VLLM_SERVER_DEV_MODE=1; elsewhere 404.
        application.add_routes(
            [
                web.post("/sleep", api.sleep),
                web.post("/wake_up", api.wake_up),
                web.get("/is_sleeping", api.is_sleeping),
                web.post("/collective_rpc", api.collective_rpc),
                web.post("/reset_prefix_cache", api.reset_prefix_cache),
                web.get("/server_info", api.server_info),
                web.post("/pause", api.pause),
                web.get("/is_paused", api.is_paused),
            ]
        )
    application.add_routes(
        [
            web.get("/health", api.empty),
            web.get("/ping", api.empty),
            web.post("/ping", api.empty),
            web.get("/v1/models", api.models),
            web.get("/metrics", api.metrics),
            web.get("/version", api.version),
            web.get("/load", api.load),
            web.post("/v1/completions", api.completions),
            web.post("/v1/chat/completions", api.chat_completions),
        ]
    )
    return application
