"""The engine interface the runner drives, and its implementation on vLLM's offline `LLM`.

vLLM is imported when `VllmEngine` is built, never at module import: the operator image and the
project's virtualenv have no vLLM. The runner enqueues requests (`LLM.enqueue` /
`LLM.enqueue_chat`, which render prompts exactly as `LLM.generate` / `LLM.chat` do) and steps the
engine itself, so finished requests are written as they finish while the engine keeps the rest of
the queue batched.

A stopping runner hands back the requests the engine has not started. vLLM reports no progress
before a request finishes (the offline `LLM` asks for final outputs only), so the ones it runs are
taken to be the oldest --max-num-seqs: its scheduler serves requests first come, first served.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llmfleet.batch.records import CHAT_URL, Choice, Completion, Request, prompt_of

log = logging.getLogger("llmfleet.batch")


class RequestRejectedError(Exception):
    """The engine refused one request (bad sampling parameters, prompt too long, ...)."""


@dataclass(frozen=True)
class Finished:
    """A request the engine is done with: its completion, or why it failed."""

    line: int
    completion: Completion | None
    error: str | None = None


class Engine(Protocol):
    @property
    def model_name(self) -> str:
        """The name responses carry in their `model` field."""
        ...

    def submit(self, request: Request, sampling: Mapping[str, Any]) -> None:
        """Queue one request; raise RequestRejectedError if the engine refuses it."""
        ...

    def step(self) -> list[Finished]:
        """Run one engine step; return the requests that finished in it."""
        ...

    def has_unfinished(self) -> bool: ...

    def withdraw(self, lines: Sequence[int]) -> list[int]:
        """Stop: drop the queued requests of `lines` (oldest first) that the engine has not
        started, and return their lines; the rest stay to finish."""
        ...


class VllmEngine:
    """vLLM's offline engine, loaded once per process from vLLM command-line engine arguments
    (the planner's flags, e.g. --model M --max-model-len 8192 --tensor-parallel-size 2)."""

    def __init__(self, engine_argv: Sequence[str]) -> None:
        # Lazy: vLLM is only in the vLLM image. mypy does not see it (not in the project venv).
        try:
            from vllm import LLM, SamplingParams  # type: ignore[import-not-found,unused-ignore]
        except ImportError as e:
            raise RuntimeError(
                f"the batch runner needs vLLM, which this Python cannot import ({e}); run it in "
                "the LLMFleet vLLM image or a virtualenv with vllm installed"
            ) from e
        from vllm.engine.arg_utils import EngineArgs  # type: ignore[import-not-found,unused-ignore]
        from vllm.utils.argparse_utils import (  # type: ignore[import-not-found,unused-ignore]
            FlexibleArgumentParser,
        )

        parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="llmfleet-batch-engine"))
        args = parser.parse_args(list(engine_argv))
        engine_args = EngineArgs.from_cli_args(args)
        self._sampling_params: Any = SamplingParams
        self._llm: Any = LLM.from_engine_args(engine_args)
        served = engine_args.served_model_name
        if isinstance(served, list | tuple) and served:
            served = served[0]
        self._model = str(served or engine_args.model)
        self._lines: dict[str, int] = {}
        self._running_at_most = _max_num_seqs(self._llm, engine_args)

    @property
    def model_name(self) -> str:
        return self._model

    def submit(self, request: Request, sampling: Mapping[str, Any]) -> None:
        try:
            params = self._sampling_params(**sampling)
            if request.url == CHAT_URL:
                ids = self._llm.enqueue_chat(
                    [list(request.body["messages"])],
                    params,
                    use_tqdm=False,
                    tools=request.body.get("tools"),
                )
            else:
                prompt = prompt_of(request)
                engine_prompt: Any = (
                    prompt if isinstance(prompt, str) else {"prompt_token_ids": prompt}
                )
                ids = self._llm.enqueue(engine_prompt, params, use_tqdm=False)
        except Exception as e:  # vLLM raises ValueError, TypeError, its own errors...
            raise RequestRejectedError(f"{type(e).__name__}: {e}") from e
        for request_id in ids:
            self._lines[_external_id(request_id)] = request.line

    def step(self) -> list[Finished]:
        done: list[Finished] = []
        for output in self._llm.llm_engine.step():
            if not getattr(output, "finished", False):
                continue
            line = self._lines.pop(_external_id(output.request_id), None)
            if line is None:
                continue
            choices = tuple(
                Choice(text=c.text, finish_reason=c.finish_reason) for c in output.outputs
            )
            if any(c.finish_reason == "abort" for c in choices):
                done.append(Finished(line, None, "the engine aborted the request"))
                continue
            prompt_tokens = len(output.prompt_token_ids or ())
            completion_tokens = sum(len(c.token_ids) for c in output.outputs)
            done.append(Finished(line, Completion(prompt_tokens, choices, completion_tokens)))
        return done

    def has_unfinished(self) -> bool:
        return bool(self._llm.llm_engine.has_unfinished_requests())

    def withdraw(self, lines: Sequence[int]) -> list[int]:
        if self._running_at_most is None:
            return []
        queued = set(lines[self._running_at_most :])
        ids = [rid for rid, line in self._lines.items() if line in queued]
        try:
            self._llm.llm_engine.abort_request(ids)
        except Exception as e:  # an older vLLM's signature: the lines simply run on
            log.warning("could not hand queued requests back (%s: %s)", type(e).__name__, e)
            return []
        dropped = {self._lines.pop(rid) for rid in ids}
        return [line for line in lines if line in dropped]


def _max_num_seqs(llm: Any, engine_args: Any) -> int | None:
    """Sequences the engine runs at once, as it was configured."""
    config = getattr(getattr(llm.llm_engine, "vllm_config", None), "scheduler_config", None)
    value = getattr(config, "max_num_seqs", None) or getattr(engine_args, "max_num_seqs", None)
    return int(value) if value else None


def _external_id(request_id: object) -> str:
    """LLM's request ids are counters; the engine may return them with a random suffix
    ("7-1a2b3c4d") while its outputs carry the bare counter."""
    return str(request_id).split("-", 1)[0]
