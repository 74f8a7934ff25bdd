"""Offline batch runner vs. the online vLLM server: the same 1,000 requests on the tiny model,
generated tokens per second of each (model loading and server start-up excluded).

* offline: `python -m llmfleet.batch.runner` (what an LLMBatchJob pod runs) on a 1,000-line
  file; its summary's tokens/s counts from its first submitted request to its last record.
* online: vLLM's OpenAI server with the same engine flags, then 1,000 /v1/completions requests
  at once from an asyncio client (high concurrency: at most CONCURRENCY in flight); completion
  tokens from `usage` over the wall time from the first request to the last answer.

Both runs generate exactly MAX_TOKENS per request (`ignore_eos`), with the same --max-num-seqs,
one engine at a time, in the vLLM CPU virtualenv (dev/dataplane/install-vllm.sh).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from localcluster.noderunner.adaptations import adapt_env

REPO = Path(__file__).resolve().parents[1]
INSTALL = REPO / "dev" / "dataplane" / "install-vllm.sh"
TINY_MODEL = REPO / "dev" / "dataplane" / "tiny_model.py"
REQUESTS = 1000
MAX_TOKENS = 64
CONCURRENCY = 256
ENGINE_ARGS = ("--max-model-len", "512", "--max-num-seqs", "256", "--enforce-eager")

CLIENT = """
import asyncio, json, sys, time
from openai import AsyncOpenAI

async def main(url, path, concurrency):
    client = AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    lines = [json.loads(line) for line in open(path)]
    gate = asyncio.Semaphore(concurrency)
    async def one(line):
        body = dict(line["body"])
        body.pop("model")
        extra = {"ignore_eos": body.pop("ignore_eos")}
        async with gate:
            r = await client.completions.create(model="tiny", extra_body=extra, **body)
        return r.usage.completion_tokens
    start = time.monotonic()
    tokens = sum(await asyncio.gather(*(one(line) for line in lines)))
    print(json.dumps({"tokens": tokens, "seconds": time.monotonic() - start}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def _python() -> Path:
    out = subprocess.run([str(INSTALL)], check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1]) / "bin" / "python"


def _env() -> dict[str, str]:
    """The node runner's environment for a vLLM process: llmfleet importable, a 1 GiB KV
    cache, AMX permission (docs/cpu-adaptations.md)."""
    return adapt_env(dict(os.environ))


def _requests(path: Path) -> None:
    with path.open("w") as f:
        for i in range(REQUESTS):
            body = {
                "model": "tiny",
                "prompt": f"Request {i}: once upon a time, in a cluster far away,",
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "ignore_eos": True,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}
            f.write(json.dumps(line) + "\n")


def offline(python: Path, model: str, work: Path) -> float:
    summary = work / "summary.json"
    subprocess.run(
        [
            str(python),
            "-m",
            "llmfleet.batch.runner",
            "--input",
            str(work / "requests.jsonl"),
            "--output-dir",
            str(work / "out"),
            "--termination-log",
            str(summary),
            "--model",
            model,
            "--served-model-name",
            "tiny",
            *ENGINE_ARGS,
        ],
        check=True,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    report = json.loads(summary.read_text())
    assert report["succeeded"] == REQUESTS, report
    assert report["completionTokens"] == REQUESTS * MAX_TOKENS, report
    return float(report["tokensPerSecond"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def online(python: Path, model: str, work: Path) -> float:
    port = _free_port()
    log = (work / "server.log").open("wb")
    server = subprocess.Popen(
        [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--served-model-name",
            "tiny",
            *ENGINE_ARGS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM server did not start; see {log.name}") from None
                time.sleep(1)
        client = subprocess.run(
            [
                str(python),
                "-c",
                CLIENT,
                f"http://127.0.0.1:{port}/v1",
                str(work / "requests.jsonl"),
                str(CONCURRENCY),
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        if client.returncode != 0:
            raise RuntimeError(f"the load client failed:\n{client.stderr[-3000:]}")
        result = json.loads(client.stdout.strip().splitlines()[-1])
        assert result["tokens"] == REQUESTS * MAX_TOKENS, result
        return float(result["tokens"] / result["seconds"])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def run() -> dict[str, float]:
    python = _python()
    model = (
        subprocess.run([str(python), str(TINY_MODEL)], check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    with tempfile.TemporaryDirectory(prefix="llmfleet-bench-batch-") as tmp:
        work = Path(tmp)
        _requests(work / "requests.jsonl")
        offline_tok_s = offline(python, model, work)
        online_tok_s = online(python, model, work)
    return {
        "batch_offline_tok_s": offline_tok_s,
        "batch_online_tok_s": online_tok_s,
        "batch_offline_vs_online": offline_tok_s / online_tok_s,
    }


if __name__ == "__main__":
    figures = run()
    json.dump(figures, sys.stdout, indent=2)
    print()
