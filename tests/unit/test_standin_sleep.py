"""The engine stand-in's sleep mode: vLLM 0.32's /sleep, /wake_up and /is_sleeping (open only
under VLLM_SERVER_DEV_MODE=1), and a sleeping engine that answers no generation until woken."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from localcluster.standin.api import app
from localcluster.standin.config import engine_config
from localcluster.standin.engine import Engine

TINY = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "max_position_embeddings": 512,
}
DEV_MODE = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
Scenario = Callable[[TestClient[Any, Any], Engine], Awaitable[Any]]


def serve(tmp_path: Path, env: dict[str, str], flags: list[str], scenario: Scenario) -> Any:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    cfg = engine_config(["--model", str(tmp_path), *flags], env)

    async def run() -> Any:
        engine = Engine(cfg, token_s=0.01)
        loop = asyncio.create_task(engine.run())
        try:
            async with TestClient(TestServer(app(engine))) as http:
                return await scenario(http, engine)
        finally:
            loop.cancel()

    return asyncio.run(run())


async def call(http: TestClient[Any, Any], method: str, path: str) -> tuple[int, Any]:
    async with http.request(method, path) as r:
        return r.status, await r.json()


# (env, flags, method, path) -> (status, body or the error's param)
ENDPOINTS: dict[str, tuple[dict[str, str], list[str], str, str, int, Any]] = {
    "sleep, level 1 by default": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/sleep",
        200,
        {"status": "sleeping", "level": 1},
    ),
    "sleep at level 2": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/sleep?level=2",
        200,
        {"status": "sleeping", "level": 2},
    ),
    "a level above 2 is refused": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/sleep?level=3",
        400,
        "level",
    ),
    "an unknown pause mode is refused": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/sleep?mode=later",
        400,
        "mode",
    ),
    "wake up, every tag": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/wake_up",
        200,
        {"status": "awake", "tags": None},
    ),
    "wake up, the tags echoed": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "POST",
        "/wake_up?tags=weights&tags=kv_cache",
        200,
        {"status": "awake", "tags": ["weights", "kv_cache"]},
    ),
    "is_sleeping is a GET": (
        DEV_MODE,
        ["--enable-sleep-mode"],
        "GET",
        "/is_sleeping",
        200,
        {"is_sleeping": False},
    ),
    "no dev mode, no sleep endpoint": (
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
        ["--enable-sleep-mode"],
        "POST",
        "/sleep",
        404,
        {"detail": "Not Found"},
    ),
    "no dev mode, no is_sleeping": (
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
        ["--enable-sleep-mode"],
        "GET",
        "/is_sleeping",
        404,
        {"detail": "Not Found"},
    ),
}


@pytest.mark.parametrize("case", ENDPOINTS)
def test_sleep_endpoints_answer_as_vllm_does(tmp_path: Path, case: str) -> None:
    env, flags, method, path, status, expected = ENDPOINTS[case]

    async def scenario(http: TestClient[Any, Any], _: Engine) -> tuple[int, Any]:
        return await call(http, method, path)

    got_status, body = serve(tmp_path, env, flags, scenario)
    assert got_status == status, body
    if isinstance(expected, str):
        assert body["error"]["param"] == expected, body
    else:
        assert body == expected


def test_the_api_key_does_not_guard_the_dev_mode_endpoints(tmp_path: Path) -> None:
    """As vLLM's middleware guards only /v1, /v2, /inference and /cohere: why LLMFleet fences
    them itself (docs/security.md)."""

    async def scenario(http: TestClient[Any, Any], _: Engine) -> tuple[int, int]:
        sleeping, _body = await call(http, "POST", "/sleep")
        models, _models = await call(http, "GET", "/v1/models")
        return sleeping, models

    flags = ["--enable-sleep-mode", "--api-key", "secret"]
    assert serve(tmp_path, DEV_MODE, flags, scenario) == (200, 401)


def test_a_sleeping_engine_holds_requests_until_it_wakes(tmp_path: Path) -> None:
    async def scenario(http: TestClient[Any, Any], engine: Engine) -> tuple[Any, ...]:
        await call(http, "POST", "/sleep")
        asleep = await call(http, "GET", "/is_sleeping")
        body = {"prompt": "hello", "max_tokens": 4}
        request = asyncio.create_task(http.post("/v1/completions", json=body))
        await asyncio.sleep(0.3)  # 30 engine steps: an awake engine would have answered
        held = not request.done()
        waiting = len(engine.sched.waiting)
        woken = await call(http, "POST", "/wake_up")
        answer = await asyncio.wait_for(request, timeout=5)
        tokens = (await answer.json())["usage"]["completion_tokens"]
        awake = await call(http, "GET", "/is_sleeping")
        return asleep, held, waiting, woken[1]["status"], answer.status, tokens, awake

    assert serve(tmp_path, DEV_MODE, ["--enable-sleep-mode"], scenario) == (
        (200, {"is_sleeping": True}),
        True,
        1,
        "awake",
        200,
        4,
        (200, {"is_sleeping": False}),
    )


@pytest.mark.parametrize(("mode", "runs_to_the_end"), [("abort", False), ("wait", True)])
def test_sleep_aborts_or_finishes_the_requests_in_flight(
    tmp_path: Path, mode: str, runs_to_the_end: bool
) -> None:
    async def scenario(http: TestClient[Any, Any], engine: Engine) -> int:
        body = {"prompt": "hello", "max_tokens": 8}
        request = asyncio.create_task(http.post("/v1/completions", json=body))
        await asyncio.sleep(0.03)
        await call(http, "POST", f"/sleep?mode={mode}")
        answer = await asyncio.wait_for(request, timeout=5)
        return int((await answer.json())["usage"]["completion_tokens"])

    tokens = serve(tmp_path, DEV_MODE, ["--enable-sleep-mode"], scenario)
    assert (tokens == 8) is runs_to_the_end, tokens
