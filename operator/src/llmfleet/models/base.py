"""The shared base of every API model, and cross-field rules that run in two places.

A cross-field rule is written once, as CEL for the API server and as a Python predicate for
pydantic, with one message: `kubectl apply` and the offline `llmfleet plan` then refuse the same
manifest with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# pydantic puts this into an error's `ctx`; `models.errors` appends it to the error's location so
# a rule on an object is reported against the field it blames, as the API server does.
RULE_FIELD_CONTEXT_KEY = "field"
CEL_RULE_ERROR_TYPE = "cel_rule"


@dataclass(frozen=True)
class CelRule:
    """A cross-field rule: `rule` is CEL over `self` (the object), `holds` is the same in Python."""

    rule: str
    message: str
    holds: Callable[[Any], bool]
    field: str | None = None  # camelCase name of the field to blame, relative to the object

    def to_schema(self) -> dict[str, str]:
        entry = {"rule": self.rule, "message": self.message}
        if self.field is not None:
            entry["fieldPath"] = f".{self.field}"
        return entry


def _add_cel_rules(schema: dict[str, Any], model: type[Any]) -> None:
    rules: tuple[CelRule, ...] = getattr(model, "cel_rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.to_schema() for rule in rules]


class ApiModel(BaseModel):
    """Frozen, camelCase on the wire, unknown fields refused (they are typos, not extensions)."""

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        alias_generator=to_camel,
        extra="forbid",
        json_schema_extra=_add_cel_rules,
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @model_validator(mode="after")
    def _check_cel_rules(self) -> Self:
        for rule in self.cel_rules:
            if not rule.holds(self):
                context = {} if rule.field is None else {RULE_FIELD_CONTEXT_KEY: rule.field}
                raise PydanticCustomError(CEL_RULE_ERROR_TYPE, rule.message, context)
        return self
