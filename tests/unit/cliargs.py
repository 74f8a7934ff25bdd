"""Reading a rendered command line the way its program parses it: the values each flag takes."""

from __future__ import annotations


def flag(args: list[str], name: str) -> list[str]:
    """The values after `name`, up to the next flag."""
    i = args.index(name) + 1
    out = []
    while i < len(args) and not args[i].startswith("--"):
        out.append(args[i])
        i += 1
    return out
