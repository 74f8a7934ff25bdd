"""The dev-mode fence (llmfleet.devfence) as a standby engine runs it: vLLM's --middleware,
here the engine stand-in's, loading the module from the ConfigMap the operator renders. Only the
operator's token opens a dev-mode path; what vLLM serves without dev mode stays as it was."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from localcluster.standin.api import app
from localcluster.standin.config import StartupError, engine_config
from localcluster.standin.engine import Engine

from llmfleet import devfence
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner
from llmfleet.render.standby import render_standby
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

TINY = {
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "max_position_embeddings": 131072,
}
TOKEN = "operator-only"
UNAUTHORIZED = {"error": "Unauthorized"}
NOT_FOUND = {"detail": "Not Found"}


def rendered_standby() -> tuple[list[str], dict[str, str]]:
    """The standby engine's flags after the model, and its fence's files, as rendered."""
    s = LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 1, "memoryGiB": 80},
            "autoscaling": {"standby": {"replicas": 1}},
        }
    )
    standby = render_standby(Owner("chat", "ns", "uid"), s, plan(s), FLEET)
    assert standby is not None
    (container,) = standby.deployment["spec"]["template"]["spec"]["containers"]
    return container["args"][1:], standby.fence["data"]


def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str, calls: Any) -> Any:
    flags, files = rendered_standby()
    fence_dir = tmp_path / "fence"
    fence_dir.mkdir()
    for name, text in files.items():
        (fence_dir / name).write_text(text)
    monkeypatch.syspath_prepend(str(fence_dir))  # the pod's PYTHONPATH
    monkeypatch.setenv(devfence.TOKEN_ENV, token)  # the pod's secretKeyRef
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY))
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"}
    cfg = engine_config(["--model", str(model), *flags], env)

    async def run() -> Any:
        engine = Engine(cfg, token_s=0.01)
        loop = asyncio.create_task(engine.run())
        try:
            async with TestClient(TestServer(app(engine))) as http:
                return await calls(http)
        finally:
            loop.cancel()

    return asyncio.run(run())


async def call(http: TestClient[Any, Any], method: str, path: str, auth: str) -> tuple[int, Any]:
    headers = {"Authorization": auth} if auth else {}
    async with http.request(method, path, headers=headers) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else ""


BEARER = f"Bearer {TOKEN}"
# name -> (method, path, Authorization header, status, body)
CALLS: dict[str, tuple[str, str, str, int, Any]] = {
    "sleep without the token": ("POST", "/sleep", "", 401, UNAUTHORIZED),
    "sleep with another token": ("POST", "/sleep", "Bearer guess", 401, UNAUTHORIZED),
    "sleep with the token in another scheme": (
        "POST",
        "/sleep",
        f"Basic {TOKEN}",
        401,
        UNAUTHORIZED,
    ),
    "sleep with the operator's token": ("POST", "/sleep", BEARER, 200, ""),
    "wake_up with the operator's token": ("POST", "/wake_up", BEARER, 200, ""),
    "is_sleeping without the token": ("GET", "/is_sleeping", "", 401, UNAUTHORIZED),
    "collective_rpc without the token": ("POST", "/collective_rpc", "", 401, UNAUTHORIZED),
    "server_info without the token": ("GET", "/server_info", "", 401, UNAUTHORIZED),
    "pause without the token": ("POST", "/pause", "", 401, UNAUTHORIZED),
    "reset_prefix_cache without the token": ("POST", "/reset_prefix_cache", "", 401, UNAUTHORIZED),
    "a path vLLM may add later, without the token": (
        "POST",
        "/new_dev_path",
        "",
        401,
        UNAUTHORIZED,
    ),
    "a path vLLM may add later, with the token": ("POST", "/new_dev_path", BEARER, 404, NOT_FOUND),
    "the API as without dev mode": ("GET", "/v1/models", "", 200, None),
    "health for the kubelet": ("GET", "/health", "", 200, ""),
    "metrics for Prometheus": ("GET", "/metrics", "", 200, None),
}


@pytest.mark.parametrize("case", CALLS)
def test_only_the_operators_token_opens_a_dev_mode_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    method, path, auth, status, body = CALLS[case]

    async def calls(http: TestClient[Any, Any]) -> tuple[int, Any]:
        async with http.request(method, path, headers={"Authorization": auth} if auth else {}) as r:
            text = await r.text()
            if body is None:  # a body of its own (the model list, the metrics text)
                return r.status, None
            return r.status, json.loads(text) if text else ""

    assert serve(tmp_path, monkeypatch, TOKEN, calls) == (status, body)


def test_a_pod_without_its_token_keeps_every_dev_path_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def calls(http: TestClient[Any, Any]) -> list[int]:
        return [(await call(http, "POST", "/sleep", auth))[0] for auth in ("", "Bearer ")]

    assert serve(tmp_path, monkeypatch, "", calls) == [401, 401]


def test_a_middleware_that_cannot_be_imported_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    cfg = engine_config(
        ["--model", str(tmp_path), "--middleware", "no_such_module.Fence"],
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    with pytest.raises(StartupError, match="no_such_module"):
        app(Engine(cfg, token_s=0.01))
