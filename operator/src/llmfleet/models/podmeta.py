"""`spec.engine.podLabels` and `spec.engine.podAnnotations`: a user's own labels and annotations
on the engine pods (a service mesh's opt-out, cost-allocation labels), refused where they would
collide with the operator's.

Map keys have no OpenAPI constraint a structural schema accepts (no `propertyNames`), so their
syntax is CEL here, written once with the same check in Python (CelRule).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import StringConstraints

from llmfleet.models.base import CelRule

# Kubernetes' qualified name (label and annotation keys): an optional DNS subdomain prefix and
# "/", then a name of at most 63 characters. `[.]` rather than `\.`: the pattern goes into a CEL
# string literal as is.
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED_NAME_PATTERN = rf"^({_PREFIX}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$"
# The prefix is at most 253 characters (a DNS subdomain).
PREFIX_LENGTH_PATTERN = r"^([^/]{1,253}/)?[^/]*$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# The operator's own prefix, and any subdomain of it.
RESERVED_PREFIX_PATTERN = r"^([^/]*[.])?llmfleet[.]dev/"
# What the operator sets on every engine pod: the Service, the router, the autoscaler's metric
# and the PodMonitor select engine pods by these labels, and Prometheus scrapes by these
# annotations (render/names.py, render/engine.py; tests/unit/test_pod_metadata.py keeps the
# lists complete).
OPERATOR_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
)
OPERATOR_ANNOTATIONS = ("prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path")
# Bounds the API server's CEL cost estimate of the rules over the keys.
MAX_POD_METADATA_ENTRIES = 64

LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]

_QUALIFIED = re.compile(QUALIFIED_NAME_PATTERN)
_PREFIX_LENGTH = re.compile(PREFIX_LENGTH_PATTERN)
_RESERVED_PREFIX = re.compile(RESERVED_PREFIX_PATTERN)

_KEY_SYNTAX = (
    "keys must be Kubernetes qualified names: an optional DNS subdomain prefix of at most 253 "
    "characters and '/', then a name of at most 63 characters (alphanumerics, '-', '_' and '.', "
    "starting and ending with an alphanumeric)"
)


def _cel_list(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{name}'" for name in names) + "]"


def _keys(entries: Mapping[str, str] | None) -> list[str]:
    return list(entries or {})


def pod_metadata_rules(
    labels: Callable[[Any], Mapping[str, str] | None],
    annotations: Callable[[Any], Mapping[str, str] | None],
) -> tuple[CelRule, ...]:
    """The rules of an object with `podLabels` and `podAnnotations`; `labels` and `annotations`
    read them from the model in Python."""

    def syntax(field: str, read: Callable[[Any], Mapping[str, str] | None]) -> CelRule:
        return CelRule(
            rule=(
                f"!has(self.{field}) || self.{field}.all(k, "
                f"k.matches('{QUALIFIED_NAME_PATTERN}') && k.matches('{PREFIX_LENGTH_PATTERN}'))"
            ),
            message=f"{field} {_KEY_SYNTAX}",
            holds=lambda m: all(
                _QUALIFIED.match(k) and _PREFIX_LENGTH.match(k) for k in _keys(read(m))
            ),
            field=field,
        )

    def reserved(
        field: str,
        read: Callable[[Any], Mapping[str, str] | None],
        names: tuple[str, ...],
        why: str,
    ) -> CelRule:
        return CelRule(
            rule=(
                f"!has(self.{field}) || self.{field}.all(k, "
                f"!k.matches('{RESERVED_PREFIX_PATTERN}') && !(k in {_cel_list(names)}))"
            ),
            message=(
                f"{field} must not set keys with the llmfleet.dev/ prefix or "
                f"{', '.join(names)}: {why}"
            ),
            holds=lambda m: (
                not any(_RESERVED_PREFIX.match(k) or k in names for k in _keys(read(m)))
            ),
            field=field,
        )

    return (
        syntax("podLabels", labels),
        reserved(
            "podLabels",
            labels,
            OPERATOR_LABELS,
            "the operator sets them on the engine pods, and its Service, router, autoscaler "
            "and PodMonitor select the pods by them",
        ),
        syntax("podAnnotations", annotations),
        reserved(
            "podAnnotations",
            annotations,
            OPERATOR_ANNOTATIONS,
            "the operator sets them on the engine pods (their metrics scrape)",
        ),
    )
