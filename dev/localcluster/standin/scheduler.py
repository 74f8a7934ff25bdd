"""The stand-in's scheduler: vLLM v1's queue accounting, without a model.

Time moves in engine steps. Each step first schedules (`schedule`), as vLLM's scheduler does:

1. every running request gets the KV blocks its next token needs; when the cache is full, the
   newest running request is preempted (its blocks freed, back to the head of the queue, to be
   recomputed when it runs again) until the older one fits;
2. then, unless something was preempted in this step, waiting requests are admitted in arrival
   order while fewer than `max_num_seqs` run and the cache has blocks for their prompt (and what
   they had generated before a preemption) plus one token; the first that does not fit waits,
   and so do all behind it.

Then the step completes (`complete`): every request it ran has one more token; those at their
max_tokens finish and free their blocks. Pure and synchronous: the server calls it from its
engine loop, and tests/lab/test_engine_standin.py step by step.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field

_ids = itertools.count(1)


@dataclass(eq=False)
class Seq:
    """One sequence (a request, or one choice of a request with n > 1)."""

    prompt_tokens: int
    max_tokens: int
    arrival: float
    id: int = field(default_factory=lambda: next(_ids))
    generated: int = 0
    blocks: int = 0
    preemptions: int = 0
    scheduled: float | None = None  # first admitted
    first_token: float | None = None
    last_token: float | None = None
    finish_reason: str | None = None  # length, abort


@dataclass
class Step:
    batch: list[Seq]  # what runs in this step: one token each
    tokens: int  # tokens computed: prompts (and recomputation) of the admitted, one per decode
    admitted: list[Seq]
    preempted: list[Seq]


class Scheduler:
    def __init__(self, max_num_seqs: int, num_blocks: int, block_size: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.used_blocks = 0
        self.preemptions = 0

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def usage(self) -> float:
        """vllm:kv_cache_usage_perc: the share of the cache's blocks in use (1 = full)."""
        return self.used_blocks / self.num_blocks if self.num_blocks else 0.0

    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def abort(self, seq: Seq) -> bool:
        """A request whose client went away: it leaves the queue or the batch. False when it
        had finished already."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        else:
            return False
        self._free(seq)
        seq.finish_reason = "abort"
        return True

    def schedule(self, now: float) -> Step:
        preempted: list[Seq] = []
        for seq in list(self.running):
            if seq not in self.running:
                continue  # preempted for an older request in this loop
            need = self._blocks_for(seq) - seq.blocks
            while need > self.free_blocks and self.running:
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq in self.running:
                self._allocate(seq, need)
        decoding = len(self.running)
        admitted: list[Seq] = []
        while not preempted and self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            need = self._blocks_for(seq)
            if need > self.free_blocks:
                break
            self.waiting.popleft()
            self._allocate(seq, need)
            self.running.append(seq)
            if seq.scheduled is None:
                seq.scheduled = now
            admitted.append(seq)
        tokens = decoding + sum(s.prompt_tokens + s.generated for s in admitted)
        return Step(list(self.running), tokens, admitted, preempted)

    def complete(self, step: Step, now: float) -> list[Seq]:
        """One token for each request of `step` still running; the finished ones."""
        finished = []
        for seq in step.batch:
            if seq not in self.running:
                continue  # aborted while the step ran
            seq.generated += 1
            if seq.first_token is None:
                seq.first_token = now
            seq.last_token = now
            if seq.generated >= seq.max_tokens:
                seq.finish_reason = "length"
                self.running.remove(seq)
                self._free(seq)
                finished.append(seq)
        return finished

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks

    def _blocks_for(self, seq: Seq) -> int:
        """Blocks for the sequence's tokens so far plus the one this step adds."""
        return math.ceil((seq.prompt_tokens + seq.generated + 1) / self.block_size)

    def _allocate(self, seq: Seq, blocks: int) -> None:
        seq.blocks += blocks
        self.used_blocks += blocks

    def _free(self, seq: Seq) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def _preempt(self, seq: Seq) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)
