"""The engine stand-in's sleep mode and the other dev-mode paths, as vLLM 0.26 answered them on
an H200 (bench/gpu/h200-2026-11-27-sleep.jsonl; open only under VLLM_SERVER_DEV_MODE=1), and a
sleeping engine that holds generation until woken."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from localcluster.standin import __main__ as standin_main
from localcluster.standin.api import app
from localcluster.standin.config import engine_config
from localcluster.standin.engine import INSTANT, Engine, SleepTimes

TINY = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "max_position_embeddings": 512,
}
DEV_MODE = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
Scenario = Callable[[TestClient[Any, Any], Engine], Awaitable[Any]]


def serve(
    tmp_path: Path,
    env: dict[str, str],
    flags: list[str],
    scenario: Scenario,
    times: SleepTimes = INSTANT,
) -> Any:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    cfg = engine_config(["--model", str(tmp_path), *flags], env)

    async def run() -> Any:
        engine = Engine(cfg, token_s=0.01, times=times)
        loop = asyncio.create_task(engine.run())
        try:
            async with TestClient(TestServer(app(engine))) as http:
                return await scenario(http, engine)
        finally:
            loop.cancel()

    return asyncio.run(run())


async def call(
    http: TestClient[Any, Any], method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """The status and the body: JSON parsed, an empty body as ""."""
    async with http.request(method, path, json=body) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else ""


NO_DEV_MODE = {"VLLM_CPU_KVCACHE_SPACE": "1"}
SLEEP = ["--enable-sleep-mode"]
MEASURED = Path(__file__).resolve().parents[2] / "bench/gpu/h200-2026-11-27-sleep.jsonl"

# (env, flags, method, path) -> (status, body or the error's param)
ENDPOINTS: dict[str, tuple[dict[str, str], list[str], str, str, int, Any]] = {
    "sleep, level 1 by default: 200, empty body": (
        DEV_MODE,
        SLEEP,
        "POST",
        "/sleep",
        200,
        "",
    ),
    "sleep at level 2": (DEV_MODE, SLEEP, "POST", "/sleep?level=2", 200, ""),
    "a level above 2 is refused": (
        DEV_MODE,
        SLEEP,
        "POST",
        "/sleep?level=3",
        400,
        "level",
    ),
    "an unknown pause mode is refused": (
        DEV_MODE,
        SLEEP,
        "POST",
        "/sleep?mode=later",
        400,
        "mode",
    ),
    "wake up: 200, empty body": (DEV_MODE, SLEEP, "POST", "/wake_up", 200, ""),
    "is_sleeping is a GET": (
        DEV_MODE,
        SLEEP,
        "GET",
        "/is_sleeping",
        200,
        {"is_sleeping": False},
    ),
    "reset_prefix_cache": (
        DEV_MODE,
        [],
        "POST",
        "/reset_prefix_cache",
        200,
        {"success": True},
    ),
    "pause": (DEV_MODE, [], "POST", "/pause", 200, {"status": "paused"}),
    "is_paused": (DEV_MODE, [], "GET", "/is_paused", 200, {"is_paused": False}),
    "collective_rpc without a method the workers have": (
        DEV_MODE,
        [],
        "POST",
        "/collective_rpc",
        500,
        None,
    ),
    "no dev mode, no sleep": (
        NO_DEV_MODE,
        SLEEP,
        "POST",
        "/sleep",
        404,
        {"detail": "Not Found"},
    ),
    "no dev mode, no wake_up": (
        NO_DEV_MODE,
        SLEEP,
        "POST",
        "/wake_up",
        404,
        {"detail": "Not Found"},
    ),
    "no dev mode, no is_sleeping": (
        NO_DEV_MODE,
        SLEEP,
        "GET",
        "/is_sleeping",
        404,
        {"detail": "Not Found"},
    ),
    "no dev mode, no server_info": (
        NO_DEV_MODE,
        [],
        "GET",
        "/server_info",
        404,
        {"detail": "Not Found"},
    ),
    "no dev mode, no collective_rpc": (
        NO_DEV_MODE,
        [],
        "POST",
        "/collective_rpc",
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
    if expected is None:
        assert body["error"]["code"] == status, body
    elif isinstance(expected, str) and expected:
        assert body["error"]["param"] == expected, body
    else:
        assert body == expected


def measured_calls() -> list[dict[str, Any]]:
    """The HTTP calls of the sleep-mode contract run against vLLM 0.26 on an H200, in order,
    without the completions (their text is the model's)."""
    lines = MEASURED.read_text().splitlines()
    calls = [json.loads(line) for line in lines]
    return [c for c in calls if "path" in c and not c["path"].startswith("/v1")]


def test_the_stand_in_answers_the_measured_contract_call_for_call(
    tmp_path: Path,
) -> None:
    """bench/gpu/sleep_contract.py's calls replayed: every status, and every body but the
    engine configuration /server_info quotes, as real vLLM answered them."""
    calls = measured_calls()
    dev = [c for c in calls if c["step"] != "without dev mode"]
    plain = [c for c in calls if c["step"] == "without dev mode"]

    def replay(selected: list[dict[str, Any]]) -> Scenario:
        async def scenario(http: TestClient[Any, Any], _: Engine) -> list[tuple[str, int, Any]]:
            out = []
            for c in selected:
                body = {"method": "get_model_info"} if c["path"] == "/collective_rpc" else None
                status, got = await call(http, c["method"], c["path"], body)
                out.append(
                    (
                        c["path"],
                        status,
                        sorted(got) if c["path"] == "/server_info" else got,
                    )
                )
            return out

        return scenario

    def expected(selected: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
        out = []
        for c in selected:
            if c["path"] == "/server_info":  # stored cut short: its one key, from the start
                body: Any = [c["body"].removeprefix('{"').partition('"')[0]]
            else:
                body = json.loads(c["body"]) if c["body"] else ""
            out.append(
                (
                    c["path"],
                    c["status"],
                    body,
                )
            )
        return out

    # The file holds the run this test was written for: the dev paths, and three without.
    assert len(dev) >= 8, dev
    assert len(plain) == 3, plain
    assert serve(tmp_path, DEV_MODE, SLEEP, replay(dev)) == expected(dev)
    assert serve(tmp_path, NO_DEV_MODE, SLEEP, replay(plain)) == expected(plain)


def test_default_sleep_and_wake_times_are_the_measured_ones_scaled_as_the_start() -> None:
    steps = {c["step"]: c["s"] for c in measured_calls()}
    scale = standin_main.DEFAULT_WARMUP_S / standin_main.MEASURED_FIRST_TOKEN_S
    measured = (steps["sleep level 1"] * scale, steps["wake_up"] * scale)
    defaults = (standin_main.DEFAULT_SLEEP_S, standin_main.DEFAULT_WAKE_S)
    assert pytest.approx(measured, rel=0.01) == defaults


def test_sleep_and_wake_take_the_configured_time(tmp_path: Path) -> None:
    async def scenario(http: TestClient[Any, Any], _: Engine) -> tuple[float, float]:
        started = time.monotonic()
        await call(http, "POST", "/sleep")
        slept = time.monotonic()
        await call(http, "POST", "/wake_up")
        return slept - started, time.monotonic() - slept

    times = SleepTimes(sleep_s=0.4, wake_s=0.2)
    sleep_s, wake_s = serve(tmp_path, DEV_MODE, SLEEP, scenario, times)
    assert 0.4 <= sleep_s < 1.0, sleep_s
    assert 0.2 <= wake_s < 0.4, wake_s


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
        return asleep, held, waiting, woken, answer.status, tokens, awake

    assert serve(tmp_path, DEV_MODE, ["--enable-sleep-mode"], scenario) == (
        (200, {"is_sleeping": True}),
        True,
        1,
        (200, ""),
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
