"""The stand-in's engine loop: steps the scheduler in real time and hands each request its tokens.

A step takes `token_s` seconds, whatever its batch (a GPU's decode step costs about the same for
1 or 64 sequences; the stand-in does not model prefill cost). Between steps the loop sleeps when
nothing is queued or running."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from .config import EngineConfig
from .metrics import Stats
from .scheduler import Scheduler, Seq

WORDS = (
    " the",
    " fleet",
    " scales",
    " when",
    " requests",
    " wait",
    " in",
    " a",
    " queue",
    ".",
)


@dataclass(frozen=True)
class Token:
    index: int  # the choice of the request
    text: str
    finish_reason: str | None  # set on a sequence's last token


@dataclass(frozen=True)
class SleepTimes:
    """How long /sleep and /wake_up take before they answer."""

    sleep_s: float = 0.0
    wake_s: float = 0.0


INSTANT = SleepTimes()


class Engine:
    def __init__(self, cfg: EngineConfig, token_s: float, times: SleepTimes = INSTANT) -> None:
        self.cfg = cfg
        self.token_s = token_s
        self.times = times
        self.sched = Scheduler(cfg.max_num_seqs, cfg.num_gpu_blocks, cfg.block_size)
        self.stats = Stats(cfg)
        self._outputs: dict[int, tuple[asyncio.Queue[Token], int]] = {}
        self._wake = asyncio.Event()
        self.draining = False  # SIGTERM: the requests in flight finish, no new one is taken
        self.sleep_level: int | None = None  # vLLM sleep mode: None awake, else the level
        self.paused = False  # vLLM's /pause: the scheduler stops, requests wait
        self._resumed = asyncio.Event()
        self._resumed.set()

    @property
    def sleeping(self) -> bool:
        return self.sleep_level is not None

    def pause(self) -> None:
        self.paused = True
        self._resumed.clear()

    async def sleep(self, level: int, mode: str) -> None:
        """vLLM's pause then sleep: `abort` ends the requests in flight, `wait` lets them
        finish first, `keep` holds them until the wake-up. Requests that arrive meanwhile wait."""
        if mode == "wait":
            while self.sched.running or self.sched.waiting:
                await asyncio.sleep(self.token_s)
        self._resumed.clear()
        self.sleep_level = level
        if mode == "abort":
            self.abort_all()
        await asyncio.sleep(self.times.sleep_s)

    async def wake_up(self) -> None:
        await asyncio.sleep(self.times.wake_s)
        self.sleep_level = None
        if not self.paused:
            self._resumed.set()
            self._wake.set()

    def submit(
        self, prompt_tokens: int, max_tokens: int, out: asyncio.Queue[Token], index: int
    ) -> Seq:
        seq = Seq(prompt_tokens, max_tokens, time.monotonic())
        self._outputs[seq.id] = (out, index)
        self.sched.add(seq)
        self._wake.set()
        return seq

    def abort(self, seq: Seq) -> None:
        """The client went away, or the server stops without draining."""
        if self.sched.abort(seq):
            self.stats.finish(seq, time.monotonic())
            out, index = self._outputs.pop(seq.id)
            out.put_nowait(Token(index, "", "abort"))

    def abort_all(self) -> None:
        for seq in [*self.sched.running, *self.sched.waiting]:
            self.abort(seq)

    async def run(self) -> None:
        while True:
            if not self._resumed.is_set():
                await self._resumed.wait()
                continue
            if self.sched.idle:
                self._wake.clear()
                await self._wake.wait()
                continue
            step = self.sched.schedule(time.monotonic())
            self.stats.step(step.tokens, step.admitted)
            before = {s.id: (s.generated, s.last_token) for s in step.batch}
            await asyncio.sleep(self.token_s)
            now = time.monotonic()
            finished = {s.id for s in self.sched.complete(step, now)}
            for seq in step.batch:
                generated, last = before[seq.id]
                if seq.generated == generated:
                    continue  # aborted while the step ran
                if generated == 0:
                    self.stats.first_token(seq, now)
                self.stats.token(None if last is None else now - last)
                out, index = self._outputs[seq.id]
                word = WORDS[(seq.id * 7 + generated) % len(WORDS)]
                out.put_nowait(Token(index, word, seq.finish_reason))
                if seq.id in finished:
                    self.stats.finish(seq, now)
                    del self._outputs[seq.id]
