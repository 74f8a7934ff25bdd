"""The stand-in's start, phase by phase: LLMFLEET_STANDIN_START_PHASES lists the phases of a
vLLM start (e.g. the planner's prediction for a model and GPU) as `name=seconds,...`; the
stand-in keeps its port closed through them in order and logs each as it ends, so that its pod
starts as long as that vLLM would and its log shows where the time went. Without it the start
is one phase, the warm-up (LLMFLEET_STANDIN_WARMUP_S)."""

from __future__ import annotations

import re

PHASES_ENV = "LLMFLEET_STANDIN_START_PHASES"
WARM_UP = "warm-up"
_NAME = re.compile(r"[a-z][a-z0-9_-]*")

Phases = tuple[tuple[str, float], ...]


def parse(text: str) -> Phases:
    """`imports=38,weight_load=64.1` -> (("imports", 38.0), ("weight_load", 64.1)); ValueError
    naming the variable and the expected form for anything else."""
    phases: list[tuple[str, float]] = []
    for item in text.split(","):
        name, sep, seconds = item.strip().partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if not sep or not _NAME.fullmatch(name) or not value >= 0:
            raise ValueError(
                f"{PHASES_ENV}={text!r}: expected name=seconds[,name=seconds...], each name "
                f"lower-case letters, digits, '_' or '-', each seconds a number >= 0; "
                f"{item.strip()!r} is not"
            )
        phases.append((name, value))
    return tuple(phases)


def phases(env_value: str, warmup_s: float) -> Phases:
    """The start's phases: those `env_value` lists, or the warm-up alone when it is empty."""
    return parse(env_value) if env_value.strip() else ((WARM_UP, warmup_s),)


def remaining(start: Phases, elapsed_s: float) -> Phases:
    """`start` less the `elapsed_s` the process has already spent (its own imports), taken from
    the first phases, so that the port opens the phases' total after the process started."""
    out: list[tuple[str, float]] = []
    for name, seconds in start:
        taken = min(seconds, elapsed_s)
        elapsed_s -= taken
        out.append((name, seconds - taken))
    return tuple(out)
