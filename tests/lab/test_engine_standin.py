"""The engine stand-in (dev/localcluster/standin): its queue accounting step by step, the KV cache
it reports, its /metrics as the operator reads them, and the node runner's hook that runs it.
tests/e2e/test_engine_standin_contract.py holds it to the real vLLM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientTimeout
from aiohttp.test_utils import TestClient, TestServer
from localcluster.noderunner import adaptations
from localcluster.standin import shapes
from localcluster.standin.api import DRAINING_MESSAGE, app
from localcluster.standin.config import StartupError, engine_config
from localcluster.standin.engine import Engine
from localcluster.standin.metrics import render
from localcluster.standin.scheduler import Scheduler, Seq
from prometheus_client.parser import text_string_to_metric_families
from standin_model import tiny_model

from llmfleet.reconcile.llmdeployment.kvcache import parse_kv_cache_tokens

REPO = Path(__file__).resolve().parents[2]
GIB = {"VLLM_CPU_KVCACHE_SPACE": "1"}


# (max_num_seqs, KV blocks, block size, requests as (prompt tokens, max_tokens)) -> (running,
# waiting) after each step's scheduling until the queue is empty, and the preemptions.
QUEUES: dict[str, tuple[int, int, int, list[tuple[int, int]], list[tuple[int, int]], int]] = {
    "max-num-seqs bounds the batch, the rest waits": (
        2,
        100,
        16,
        [(4, 3)] * 5,
        [(2, 3)] * 3 + [(2, 1)] * 3 + [(1, 0)] * 3,
        0,
    ),
    "all run when max-num-seqs allows": (8, 100, 16, [(4, 2)] * 3, [(3, 0)] * 2, 0),
    "first come first served: a long request holds the only slot": (
        1,
        100,
        16,
        [(4, 3), (4, 1)],
        [(1, 1)] * 3 + [(1, 0)],
        0,
    ),
    "a full KV cache keeps requests waiting below max-num-seqs": (
        4,
        2,
        4,
        [(3, 1)] * 4,
        [(2, 2), (2, 0)],
        0,
    ),
    "a full KV cache preempts the newest running request": (
        2,
        3,
        2,
        [(1, 4), (1, 4)],
        [(2, 0), (1, 1), (1, 1), (1, 1), (1, 0), (1, 0), (1, 0)],
        1,
    ),
}


@pytest.mark.parametrize("case", list(QUEUES), ids=list(QUEUES))
def test_requests_run_up_to_max_num_seqs_and_the_rest_wait(case: str) -> None:
    max_num_seqs, blocks, block_size, requests, expected, preemptions = QUEUES[case]
    sched = Scheduler(max_num_seqs, blocks, block_size)
    seqs = [Seq(prompt, max_tokens, arrival=0.0) for prompt, max_tokens in requests]
    for seq in seqs:
        sched.add(seq)
    seen = []
    for t in range(1, 100):
        if sched.idle:
            break
        step = sched.schedule(float(t))
        seen.append((len(sched.running), len(sched.waiting)))
        assert 0 <= sched.usage <= 1
        sched.complete(step, float(t))
    assert seen == expected
    assert sched.preemptions == preemptions
    assert sched.used_blocks == 0
    assert [s.generated for s in seqs] == [m for _, m in requests]
    assert {s.finish_reason for s in seqs} == {"length"}


def test_an_aborted_request_leaves_the_queue_and_frees_its_blocks() -> None:
    sched = Scheduler(1, 10, 4)
    running, waiting = Seq(5, 10, 0.0), Seq(5, 10, 0.0)
    sched.add(running)
    sched.add(waiting)
    sched.complete(sched.schedule(1.0), 1.0)
    assert sched.used_blocks == 2
    assert sched.abort(waiting)
    assert sched.abort(running)
    assert not sched.abort(running)
    assert sched.idle
    assert sched.used_blocks == 0
    assert running.finish_reason == waiting.finish_reason == "abort"


# (flags after --model, env, model config changes) -> (num_gpu_blocks, block size, KV tokens)
KV_CACHES: dict[str, tuple[list[str], dict[str, str], dict[str, Any], tuple[int, int, int]]] = {
    # What the real engine reported for the operator's tiny LLMDeployment (1 GiB, 64 KiB a block).
    "the tiny model in 1 GiB": (["--max-model-len", "512"], GIB, {}, (16384, 128, 2097152)),
    "test_plan_verified's override": (
        ["--max-model-len", "512", "--block-size", "32", "--num-gpu-blocks-override", "41"],
        GIB,
        {},
        (41, 32, 1312),
    ),
    # A request of 500 tokens takes 4 blocks of 128: 4096 requests of 500 tokens.
    "a length that is no multiple of the block": (
        ["--max-model-len", "500"],
        GIB,
        {},
        (16384, 128, 2048000),
    ),
    "float32 and 2 GiB": (
        ["--max-model-len", "512", "--dtype", "float32"],
        {"VLLM_CPU_KVCACHE_SPACE": "2"},
        {},
        (16384, 128, 2097152),
    ),
    "an fp8 cache, head_dim from hidden_size": (
        ["--kv-cache-dtype", "fp8", "--max-model-len", "1024"],
        GIB,
        {"head_dim": None},
        (32768, 128, 4194304),
    ),
    "the variable wins over --kv-cache-memory-bytes": (
        ["--kv-cache-memory-bytes", "2G", "--max-model-len", "2048"],
        GIB,
        {},
        (16384, 128, 2097152),
    ),
}


@pytest.mark.parametrize("case", list(KV_CACHES), ids=list(KV_CACHES))
def test_the_kv_cache_is_what_vllms_cpu_build_allocates(tmp_path: Path, case: str) -> None:
    flags, env, changes, (blocks, block_size, tokens) = KV_CACHES[case]
    where = tiny_model(tmp_path, **changes)
    cfg = engine_config(["--model", where, *flags, "--unknown", "x"], env)
    assert (cfg.num_gpu_blocks, cfg.block_size, cfg.kv_cache_size_tokens) == (
        blocks,
        block_size,
        tokens,
    )
    page = render(cfg, Scheduler(2, blocks, block_size), Engine(cfg, 0.01).stats)
    # What the operator reads for PlanVerified, through its own parser.
    assert parse_kv_cache_tokens(page) == tokens
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert families["vllm:num_requests_waiting"].type == "gauge"
    assert families["vllm:num_preemptions"].type == "counter"
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--model", "/nowhere"], GIB, "Invalid repository ID or local directory"),
        ([], {"VLLM_CPU_KVCACHE_SPACE": "0.5"}, "VLLM_CPU_KVCACHE_SPACE"),
        ([], {"VLLM_CPU_KVCACHE_SPACE": "0"}, "KV cache blocks are needed"),
        (["--max-model-len", "4096"], GIB, "greater than the derived max_model_len"),
    ],
)
def test_vllm_would_not_start(
    tmp_path: Path, flags: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(StartupError, match=message):
        engine_config(["--model", tiny_model(tmp_path), *flags], env)


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["{model}", "--max-num-seqs", "3"], id="positional-as-vllm-serve"),
        pytest.param(["--model", "{model}", "--max-num-seqs", "3"], id="model-flag-as-before"),
    ],
)
def test_the_model_is_read_first_positional_or_as_model(tmp_path: Path, flags: list[str]) -> None:
    where = tiny_model(tmp_path)
    cfg = engine_config([f.format(model=where) for f in flags], GIB)
    assert (cfg.model, cfg.max_num_seqs) == (where, 3)


def test_the_server_counts_running_and_waiting_requests(tmp_path: Path) -> None:
    flags = ["--model", tiny_model(tmp_path), "--max-num-seqs", "2"]
    flags += ["--served-model-name", "tiny"]
    cfg = engine_config(flags, GIB)

    async def scenario() -> tuple[list[tuple[float, float]], list[Any]]:
        engine = Engine(cfg, token_s=0.01)
        loop = asyncio.create_task(engine.run())
        async with TestClient(TestServer(app(engine))) as http:

            async def one(i: int) -> Any:
                body = {"model": "tiny", "prompt": f"Request {i}", "max_tokens": 20}
                async with http.post("/v1/completions", json=body) as r:
                    return await r.json()

            requests = [asyncio.create_task(one(i)) for i in range(5)]
            samples = []
            while not all(r.done() for r in requests):
                page = await (await http.get("/metrics")).text()
                gauges = {
                    f.name: f.samples[0].value
                    for f in text_string_to_metric_families(page)
                    if f.name in ("vllm:num_requests_running", "vllm:num_requests_waiting")
                }
                samples.append(
                    (gauges["vllm:num_requests_running"], gauges["vllm:num_requests_waiting"])
                )
                await asyncio.sleep(0.02)
            loop.cancel()
            return samples, [r.result() for r in requests]

    samples, bodies = asyncio.run(scenario())
    assert max(r for r, _ in samples) == 2
    assert max(w for _, w in samples) == 3
    assert all(r + w <= 5 for r, w in samples)
    assert [b["usage"]["completion_tokens"] for b in bodies] == [20] * 5


def test_a_client_that_goes_away_aborts_its_request(tmp_path: Path) -> None:
    cfg = engine_config(["--model", tiny_model(tmp_path), "--max-num-seqs", "1"], GIB)

    async def scenario() -> tuple[int, int, float]:
        engine = Engine(cfg, token_s=0.01)
        loop = asyncio.create_task(engine.run())
        server = TestServer(app(engine), handler_cancellation=True)
        async with TestClient(server) as http:
            for stream in (False, True):
                body = {"prompt": "x", "max_tokens": 400, "stream": stream}
                with contextlib.suppress(TimeoutError):
                    async with http.post(
                        "/v1/completions", json=body, timeout=ClientTimeout(total=0.3)
                    ) as r:
                        await r.read()
            await asyncio.sleep(0.2)
            loop.cancel()
            return len(engine.sched.running), engine.stats.finished["abort"], engine.sched.usage

    assert asyncio.run(scenario()) == (0, 2, 0.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        answer: dict[str, Any] = json.load(r)
        return answer


def health(url: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return int(r.status)
    except OSError:
        return 0


@pytest.mark.parametrize(
    ("shutdown_timeout", "finish_reason"),
    [("30", "length"), ("0", "abort")],
    ids=["drains within --shutdown-timeout", "--shutdown-timeout 0 cuts requests short"],
)
def test_sigterm_drains_or_aborts_in_flight_requests_then_closes_the_port(
    tmp_path: Path, shutdown_timeout: str, finish_reason: str
) -> None:
    """As vLLM 0.32 on SIGTERM: the requests in flight finish within --shutdown-timeout (0: they
    end at once, finish_reason abort) while the port stays open, /health answers 200 and a new
    completion fails with vLLM's 500; then the port closes and the process exits 0. The operator
    renders --shutdown-timeout so that a pod scaled down drains (test_autoscaling.py,
    test_router.py)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = ["--model", tiny_model(tmp_path), "--host", "127.0.0.1", "--port", str(port)]
    flags += ["--max-num-seqs", "2", "--shutdown-timeout", shutdown_timeout]
    env = {
        **os.environ,
        **GIB,
        "PYTHONPATH": str(REPO / "dev"),
        "LLMFLEET_STANDIN_TOKEN_S": "0.01",
        "LLMFLEET_STANDIN_WARMUP_S": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "localcluster.standin", *flags],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    late: tuple[int, dict[str, Any]] | None = None
    try:
        deadline = time.monotonic() + 30
        while health(url) != 200:
            assert proc.poll() is None, "the stand-in exited"
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.05)
        with ThreadPoolExecutor(2) as pool:
            body = {"prompt": "Drain", "max_tokens": 200}
            requests = [pool.submit(post, f"{url}/v1/completions", body) for _ in range(2)]
            while gauge(url, "vllm:num_requests_running") < 2:
                assert time.monotonic() < deadline, "the requests did not start"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            if finish_reason == "length":  # draining (2 s a request): still listening
                assert not any(r.done() for r in requests)
                assert health(url) == 200
                late = post_error(f"{url}/v1/completions", {"prompt": "Late", "max_tokens": 5})
            answers = [r.result() for r in requests]
        assert proc.wait(30) == 0
        assert health(url) == 0  # the port closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    got = [(a["usage"]["completion_tokens"], a["choices"][0]["finish_reason"]) for a in answers]
    assert {reason for _, reason in got} == {finish_reason}, got
    if finish_reason == "length":
        assert [tokens for tokens, _ in got] == [200, 200]
        assert late == (500, shapes.error(500, DRAINING_MESSAGE, None))
    else:
        assert all(tokens < 200 for tokens, _ in got), got


def post_error(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a request that fails."""
    try:
        post(url, body)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    raise AssertionError(f"{url} answered {body}")


def gauge(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        page = r.read().decode()
    found = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", page, re.M)
    return float(found.group(1)) if found else 0.0


VLLM_SERVER = ["/venv/bin/python", "-m", adaptations.VLLM_MODULE, "--model", "m", "--port", "8000"]
# `vllm serve m --port 8000` as the node runner runs it (adaptation 1).
VLLM_SERVE = ["/venv/bin/python", "-m", adaptations.LAB_VLLM_MODULE, "serve", "m", "--port", "8000"]
ASKS = {adaptations.STAND_IN_ANNOTATION: "stand-in"}


@pytest.mark.parametrize(
    ("argv", "annotations", "expected"),
    [
        (
            VLLM_SERVER,
            ASKS,
            ["/venv/bin/python", "-m", "localcluster.standin", "--model", "m", "--port", "8000"],
        ),
        (
            VLLM_SERVE,
            ASKS,
            ["/venv/bin/python", "-m", "localcluster.standin", "m", "--port", "8000"],
        ),
        (VLLM_SERVER, {}, None),
        (VLLM_SERVE, {}, None),
        (VLLM_SERVER, {adaptations.STAND_IN_ANNOTATION: "vllm"}, None),
        # LLMBatchJob pods and a multi-node replica's workers keep vLLM.
        (["/venv/bin/python", "-m", adaptations.BATCH_RUNNER_MODULE], ASKS, None),
        ([*VLLM_SERVE, "--headless"], ASKS, None),
    ],
)
def test_only_an_annotated_vllm_server_runs_the_stand_in(
    argv: list[str], annotations: dict[str, str], expected: list[str] | None
) -> None:
    env = {"PYTHONPATH": "/pod", "HOME": "/tmp"}
    got = adaptations.stand_in(argv, env, annotations)
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert got[0] == expected
    assert got[1]["PYTHONPATH"] == f"{REPO / 'dev'}:/pod"
    assert env["PYTHONPATH"] == "/pod"


def test_the_stand_in_settings_annotations_become_its_environment() -> None:
    annotations = {
        adaptations.STAND_IN_ANNOTATION: "stand-in",
        "lab.llmfleet.test/stand-in-token-seconds": "0.05",
        "lab.llmfleet.test/stand-in-warm-up-seconds": "3",
        "lab.llmfleet.test/stand-in-start-phases": "imports=38,compile=8.3",
    }
    got = adaptations.stand_in(VLLM_SERVER, {}, annotations)
    assert got is not None
    assert got[1]["LLMFLEET_STANDIN_TOKEN_S"] == "0.05"
    assert got[1]["LLMFLEET_STANDIN_WARMUP_S"] == "3"
    assert got[1]["LLMFLEET_STANDIN_START_PHASES"] == "imports=38,compile=8.3"


def test_every_adaptation_is_a_row_of_the_documents_table_in_the_same_order() -> None:
    doc = (REPO / "docs" / "cpu-adaptations.md").read_text()
    rows = [int(n) for n in re.findall(r"^\| (\d+) \|", doc, flags=re.MULTILINE)]
    assert rows == list(range(1, len(adaptations.ADAPTATIONS) + 1))
    names = [name for name, _ in adaptations.ADAPTATIONS]

    def row(name: str) -> str:
        return doc.split(f"| {names.index(name) + 1} |", 1)[1].split("\n", 1)[0]

    assert adaptations.STAND_IN_ANNOTATION in row("stand-in")
    assert adaptations.STAND_IN_MODULE in row("stand-in")
    assert adaptations.LAB_VOLUMES_ENV in row("runtime-paths")
