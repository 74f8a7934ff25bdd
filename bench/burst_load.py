"""The burst replay's client: open-loop streamed completions through the router.

Each request is sent at its time in the schedule, whatever the earlier ones got (as llm-d's
load generator does at a fixed rate); it counts as failed on any status other than 200, a
connection error, fewer tokens than asked, or no end within the timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

# A stand-in of a 1000-token prompt (the stand-in counts words; prefill is not modelled).
PROMPT = "Summarise the following support ticket for the on-call engineer. " * 5


@dataclass
class Record:
    sent: float  # seconds from the load's start, as scheduled
    ttft_s: float | None
    end_s: float  # seconds from the load's start
    status: int  # 0: no HTTP answer
    tokens: int
    ok: bool
    error: str = ""


async def _one(
    session: aiohttp.ClientSession,
    at: float,
    *,
    url: str,
    model: str,
    max_tokens: int,
    timeout_s: float,
    t0: float,
) -> Record:
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.monotonic()
    first: float | None = None
    tokens, status, error = 0, 0, ""
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, json=body) as response:
                status = response.status
                async for raw in response.content:
                    line = raw.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens = int(chunk["usage"]["completion_tokens"])
                    choices = chunk.get("choices") or []
                    if choices and choices[0].get("text") and first is None:
                        first = time.monotonic() - start
    except TimeoutError:
        error = f"timeout after {timeout_s:.0f} s"
    except (aiohttp.ClientError, OSError, ValueError) as e:
        error = f"{type(e).__name__}: {e}"
    ok = status == 200 and not error and tokens >= max_tokens
    if status != 200 and not error:
        error = f"HTTP {status}"
    elif not ok and not error:
        error = f"{tokens} of {max_tokens} tokens"
    return Record(at, first, time.monotonic() - t0, status, tokens, ok, error)


async def _replay(
    url: str, model: str, schedule: Sequence[float], max_tokens: int, timeout_s: float
) -> list[Record]:
    # No pool limit: an open-loop client opens a connection for every request in flight.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.monotonic()
        tasks = []
        for at in schedule:
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(
                asyncio.create_task(
                    _one(
                        session,
                        at,
                        url=url,
                        model=model,
                        max_tokens=max_tokens,
                        timeout_s=timeout_s,
                        t0=t0,
                    )
                )
            )
        return list(await asyncio.gather(*tasks))


def replay(
    base: str,
    model: str,
    schedule: Sequence[float],
    *,
    max_tokens: int,
    timeout_s: float,
    out: Path,
) -> list[Record]:
    """Send every request of `schedule` (seconds from now) to `base`/completions; the records,
    also written to `out` (JSON lines)."""
    records = asyncio.run(_replay(f"{base}/completions", model, schedule, max_tokens, timeout_s))
    out.write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))
    return records
