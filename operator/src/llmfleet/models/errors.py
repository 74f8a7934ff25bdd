"""Turn pydantic validation errors into `spec.<camelCase path>: message` lines.

Shared by the offline CLI and the operator's status conditions, so both name fields the way a
user writes them in the manifest (and the way the API server reports them).
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from llmfleet.models.base import RULE_FIELD_CONTEXT_KEY


class FieldProblem(NamedTuple):
    """One invalid field: its path in the manifest and what is wrong with it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _path(root: str, error: ErrorDetails) -> str:
    path = root
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    blamed = (error.get("ctx") or {}).get(RULE_FIELD_CONTEXT_KEY)
    if isinstance(blamed, str):
        path += f".{blamed}"
    return path


def field_problems(error: ValidationError, root: str = "spec") -> tuple[FieldProblem, ...]:
    """Each error in `error`, located under `root` (the object that was validated)."""
    return tuple(
        FieldProblem(_path(root, detail), detail["msg"])
        for detail in error.errors(include_url=False, include_input=False)
    )


def describe_validation_error(error: ValidationError, root: str = "spec") -> str:
    """All problems in one line each, for an error message or a condition message."""
    return "\n".join(str(problem) for problem in field_problems(error, root))
