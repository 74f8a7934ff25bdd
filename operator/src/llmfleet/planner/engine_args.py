"""vLLM's command line: derived flags, with `spec.engine.extraArgs` taking precedence."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from llmfleet.planner.errors import PlanError

EXTRA_ARGS_FIELD = "spec.engine.extraArgs"

# vLLM's short spellings of flags the planner derives (-tp and friends are refused earlier).
_SHORT_FLAGS = {"-q": "--quantization"}
# vLLM accepts human-readable lengths: lower-case suffixes are powers of 1000, upper-case of 1024.
_HUMAN_INT = re.compile(r"^(\d+)([kKmM]?)$")
_SUFFIX = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}


@dataclass(frozen=True)
class ArgGroup:
    """A flag and the tokens after it up to the next flag, as the user wrote them."""

    flag: str | None  # normalised `--long-name`; None for leading bare values
    tokens: tuple[str, ...]

    @property
    def value(self) -> str | None:
        first = self.tokens[0]
        if "=" in first and self.flag is not None:
            return first.split("=", 1)[1]
        return self.tokens[1] if len(self.tokens) > 1 else None


def flag_name(token: str) -> str | None:
    """`--max_model_len=4` -> `--max-model-len`; None when `token` is not a flag."""
    name = token.split("=", 1)[0]
    if name in _SHORT_FLAGS:
        return _SHORT_FLAGS[name]
    if name.startswith("--") and len(name) > 2:
        return "--" + name[2:].replace("_", "-")
    return None


def group_args(args: Sequence[str]) -> tuple[ArgGroup, ...]:
    groups: list[ArgGroup] = []
    for token in args:
        name = flag_name(token)
        if name is not None or not groups:
            groups.append(ArgGroup(name, (token,)))
        else:
            last = groups[-1]
            groups[-1] = ArgGroup(last.flag, (*last.tokens, token))
    return tuple(groups)


def overridden_value(groups: Sequence[ArgGroup], flag: str) -> str | None:
    """The last value the user gave `flag` (argparse keeps the last one too)."""
    found: str | None = None
    for group in groups:
        if group.flag == flag:
            if group.value is None:
                raise PlanError(EXTRA_ARGS_FIELD, f"{flag} needs a value")
            found = group.value
    return found


def parse_int_override(groups: Sequence[ArgGroup], flag: str, minimum: int) -> int | None:
    raw = overridden_value(groups, flag)
    if raw is None:
        return None
    match = _HUMAN_INT.match(raw)
    if match is None:
        raise PlanError(EXTRA_ARGS_FIELD, f"{flag} {raw!r} is not a whole number of tokens")
    number = int(match.group(1)) * _SUFFIX[match.group(2)]
    if number < minimum:
        raise PlanError(EXTRA_ARGS_FIELD, f"{flag} {number} must be at least {minimum}")
    return number


def parse_fraction_override(groups: Sequence[ArgGroup], flag: str) -> float | None:
    raw = overridden_value(groups, flag)
    if raw is None:
        return None
    try:
        fraction = float(raw)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise PlanError(EXTRA_ARGS_FIELD, f"{flag} {raw!r} must be a number in (0, 1]")
    return fraction


def merge_args(
    derived: Sequence[tuple[str, tuple[str, ...]]], extra: Sequence[ArgGroup]
) -> tuple[str, ...]:
    """Derived flags in order, each replaced in place by the user's flag of the same name; the
    user's other arguments follow in their order."""
    overridden = {group.flag for group in extra if group.flag is not None}
    args: list[str] = []
    for flag, values in derived:
        if flag in overridden:
            for group in extra:
                if group.flag == flag:
                    args.extend(group.tokens)
        else:
            args.extend((flag, *values))
    derived_flags = {flag for flag, _ in derived}
    for group in extra:
        if group.flag is None or group.flag not in derived_flags:
            args.extend(group.tokens)
    return tuple(args)


# Flags that are allowed but make the endpoint less safe, with what each opens up.
WEAKENING_FLAGS: dict[str, str] = {
    "--trust-remote-code": (
        "runs Python code that comes with the model's repository inside the engine"
    ),
    "--allowed-local-media-path": (
        "lets any request read files under that path of the engine's filesystem as media"
    ),
    "--api-key": (
        "puts the API key in plain text in the Deployment, readable by anyone who may read "
        "Deployments; give VLLM_API_KEY from a Secret instead"
    ),
    "--allowed-origins": "lets web pages of those origins call the endpoint from a browser",
    "--allow-credentials": "lets browsers send their credentials along with cross-origin calls",
}


def weakening_args(args: Sequence[str]) -> tuple[str, ...]:
    """What `spec.engine.extraArgs` gives up of the endpoint's safety, one line per flag, in
    the order they were given."""
    seen = dict.fromkeys(g.flag for g in group_args(args) if g.flag in WEAKENING_FLAGS)
    return tuple(f"{flag} {WEAKENING_FLAGS[flag]}" for flag in seen if flag is not None)
