"""The flags the pinned vLLM's `vllm serve` accepts, and the check of `spec.engine.extraArgs`
against them, so a typo is refused at plan time instead of crash-looping a GPU pod.

The table, vllm_flags.json beside this module, is generated from vLLM's own argument parser by
`make engine-flags` (dev/dataplane/engine_flags.py); nothing in it is typed by hand.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from llmfleet.planner.engine_args import EXTRA_ARGS_FIELD
from llmfleet.planner.errors import PlanError

TABLE_FILE = "vllm_flags.json"
Takes = Literal["none", "one", "optional", "many"]

UNKNOWN_REASON = "UnknownEngineFlag"
VALUE_REASON = "InvalidEngineFlagValue"
# argparse reads "-1" or "-.5" as a value, not as an option (its _negative_number_matcher).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Flag:
    takes: Takes  # how many values follow: none, one, optional (0 or 1), many (1 or more)
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class FlagTable:
    vllm_version: str
    flags: Mapping[str, Flag]

    def suggestion(self, name: str) -> str:
        close = difflib.get_close_matches(name, [f for f in self.flags if f.startswith("--")], 1)
        return f"; did you mean {close[0]}?" if close else ""


def load_table(text: str) -> FlagTable:
    data = json.loads(text)
    flags = {
        name: Flag(
            takes=entry["takes"],
            choices=tuple(entry["choices"]) if entry.get("choices") is not None else None,
        )
        for name, entry in data["flags"].items()
    }
    return FlagTable(vllm_version=str(data["vllm"]), flags=flags)


@cache
def pinned_flags() -> FlagTable:
    """The table of the vLLM the chart's default engine image runs."""
    return load_table(resources.files(__package__).joinpath(TABLE_FILE).read_text())


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NEGATIVE_NUMBER.match(token)


def _spelled_out(token: str) -> str:
    """`-O3` (or `-O=3`) -> `--optimization-level=3`, as vLLM's parser rewrites it."""
    if token.startswith("-O") and len(token) > 2:
        return "--optimization-level=" + token[2:].removeprefix("=")
    return "--optimization-level" if token == "-O" else token


def _canonical(name: str) -> str:
    """`--max_num_seqs` -> `--max-num-seqs`, as vLLM's parser reads it; `--x.y` (a JSON
    config flag's key) -> `--x`."""
    if not name.startswith("--"):
        return name
    return "--" + name[2:].split(".", 1)[0].replace("_", "-")


def check_engine_args(
    args: Sequence[str],
    table: FlagTable,
    *,
    positionals: int = 0,
    field: str = EXTRA_ARGS_FIELD,
) -> None:
    """Raise PlanError naming the first argument the pinned `vllm serve` would refuse, or that
    abbreviates a flag. (Flags LLMFleet sets itself are refused at admission, models/engine.py.)
    `positionals`: bare values `args` may start with (1: the model of a whole `vllm serve`
    command line; 0 for extraArgs); `field`: what the refusal names."""
    version = table.vllm_version
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not _is_option(token):
            if positionals > 0:
                positionals -= 1
                continue
            raise PlanError(
                field,
                f"{token!r} is not a flag and follows no flag that takes a value: extraArgs "
                f"are vLLM flags (--flag value or --flag=value); vllm serve {version} would "
                "refuse it",
                reason=UNKNOWN_REASON,
            )
        written, eq, inline = _spelled_out(token).partition("=")
        name = _canonical(written)
        flag = table.flags.get(name)
        if flag is None:
            _refuse_abbreviation(written, name, table, field)
            raise PlanError(
                field,
                f"{written} is not a flag of vllm serve {version} (a misspelling, or a flag "
                f"that version removed)" + table.suggestion(name),
                reason=UNKNOWN_REASON,
            )
        values: list[str] = [inline] if eq else []
        if flag.takes == "none" and eq:
            raise PlanError(field, f"{written} takes no value", reason=VALUE_REASON)
        if not eq and flag.takes in ("one", "many"):
            if i >= len(args) or _is_option(args[i]):
                raise PlanError(field, f"{written} needs a value", reason=VALUE_REASON)
            values.append(args[i])
            i += 1
        if flag.takes == "many" or (flag.takes == "optional" and not eq):
            while i < len(args) and not _is_option(args[i]):
                values.append(args[i])
                i += 1
                if flag.takes == "optional":
                    break
        _check_choices(written, flag, values, field)


def _refuse_abbreviation(written: str, name: str, table: FlagTable, field: str) -> None:
    longer = [f for f in table.flags if f.startswith(name) and name.startswith("--")]
    if longer:
        raise PlanError(
            field,
            f"{written} is not a whole flag of vllm serve {table.vllm_version}; did you mean "
            f"{' or '.join(sorted(longer)[:3])}? (vLLM takes an unambiguous abbreviation, but "
            "LLMFleet reads overrides by their full name, and a later vLLM may add a flag that "
            "the same letters abbreviate)",
            reason=UNKNOWN_REASON,
        )


def _check_choices(written: str, flag: Flag, values: Sequence[str], field: str) -> None:
    if flag.choices is None:
        return
    for value in values:
        if value not in flag.choices:
            raise PlanError(
                field,
                f"{written} {value!r} is not one of: {', '.join(flag.choices)}",
                reason=VALUE_REASON,
            )
