"""Generate a CustomResourceDefinition from pydantic models.

Kubernetes wants an OpenAPI v3.0 *structural* schema: no `$ref`, a `type` at every level,
`nullable` instead of `null` types, boolean `exclusiveMinimum`, no `title`, and no
`additionalProperties` beside `properties`. pydantic emits JSON Schema 2020-12, so the schema is
rewritten here rather than maintained by hand next to the models.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

JsonSchema = dict[str, Any]

_NULL = {"type": "null"}
_DROPPED_KEYS = frozenset({"title", "examples", "$defs"})


class SchemaConversionError(ValueError):
    """The model uses a construct a structural schema cannot express."""


@dataclass(frozen=True)
class ResourceNames:
    """The names a CRD registers for its kind."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()


@dataclass(frozen=True)
class PrinterColumn:
    """One `kubectl get` column."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


AGE_COLUMN = PrinterColumn(
    name="Age",
    type="date",
    json_path=".metadata.creationTimestamp",
    description="Time since the resource was created.",
)


@dataclass(frozen=True)
class CrdDefinition:
    """Everything needed to generate one single-version, namespaced CRD."""

    group: str
    version: str
    names: ResourceNames
    description: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None = None
    printer_columns: tuple[PrinterColumn, ...] = field(default=())
    # CEL over the whole object, for what the spec's own rules cannot see (metadata.name).
    object_rules: tuple[dict[str, str], ...] = field(default=())

    @property
    def name(self) -> str:
        return f"{self.names.plural}.{self.group}"


def openapi_schema(model: type[BaseModel]) -> JsonSchema:
    """The structural OpenAPI v3 schema of `model`, as the CRD's validation section wants it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions: dict[str, JsonSchema] = raw.get("$defs", {})
    return _convert(raw, definitions, model.__name__)


def _resolve(ref: str, definitions: dict[str, JsonSchema], where: str) -> JsonSchema:
    name = ref.rsplit("/", 1)[-1]
    if name not in definitions:
        raise SchemaConversionError(f"{where}: unresolvable $ref {ref}")
    return copy.deepcopy(definitions[name])


def _convert(node: JsonSchema, definitions: dict[str, JsonSchema], where: str) -> JsonSchema:
    node = dict(node)
    if "$ref" in node:
        # Sibling keys (a field's description, default) override the referenced model's.
        target = _resolve(node.pop("$ref"), definitions, where)
        return _convert({**target, **node}, definitions, where)
    if "allOf" in node and len(node["allOf"]) == 1:
        (only,) = node.pop("allOf")
        return _convert({**only, **node}, definitions, where)
    if "anyOf" in node:
        options = node.pop("anyOf")
        others = [option for option in options if option != _NULL]
        if len(others) != 1:
            raise SchemaConversionError(f"{where}: unions other than `X | None` are not structural")
        merged = {**others[0], **node}
        if len(others) < len(options):
            merged["nullable"] = True
            if merged.get("default", ...) is None:
                del merged["default"]
        return _convert(merged, definitions, where)

    out: JsonSchema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            out[key] = {
                name: _convert(child, definitions, f"{where}.{name}")
                for name, child in value.items()
            }
        elif key == "items":
            out[key] = _convert(value, definitions, f"{where}[]")
        elif key == "additionalProperties":
            # `extra="forbid"` yields `false`; the API server prunes unknown fields instead.
            if isinstance(value, dict) and "properties" not in node:
                out[key] = _convert(value, definitions, f"{where}{{}}")
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    _check_structural(out, where)
    return out


def _check_structural(schema: JsonSchema, where: str) -> None:
    if "type" not in schema:
        raise SchemaConversionError(f"{where}: has no type")
    if schema["type"] == "null" or isinstance(schema["type"], list):
        raise SchemaConversionError(f"{where}: type must be a single non-null type")
    for name, child in schema.get("properties", {}).items():
        if not child.get("description"):
            raise SchemaConversionError(f"{where}.{name}: has no description")


def custom_resource_definition(definition: CrdDefinition) -> dict[str, Any]:
    """A complete apiextensions.k8s.io/v1 CustomResourceDefinition for `definition`."""
    names = definition.names
    properties: JsonSchema = {
        "apiVersion": {
            "type": "string",
            "description": "Versioned schema of this object; here "
            f"{definition.group}/{definition.version}.",
        },
        "kind": {
            "type": "string",
            "description": f"Kind of this object; here {names.kind}.",
        },
        # The API server refuses anything but `type: object` for metadata at the root.
        "metadata": {"type": "object"},
        "spec": openapi_schema(definition.spec_model),
    }
    version: dict[str, Any] = {
        "name": definition.version,
        "served": True,
        "storage": True,
    }
    if definition.status_model is not None:
        properties["status"] = openapi_schema(definition.status_model)
        version["subresources"] = {"status": {}}
    version["schema"] = {
        "openAPIV3Schema": {
            "type": "object",
            "description": definition.description,
            "required": ["spec"],
            "properties": properties,
        }
    }
    if definition.object_rules:
        version["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [
            dict(rule) for rule in definition.object_rules
        ]
    if definition.printer_columns:
        version["additionalPrinterColumns"] = [
            column.to_crd() for column in definition.printer_columns
        ]
    crd_names: dict[str, Any] = {
        "kind": names.kind,
        "listKind": f"{names.kind}List",
        "plural": names.plural,
        "singular": names.singular,
    }
    if names.short_names:
        crd_names["shortNames"] = list(names.short_names)
    if names.categories:
        crd_names["categories"] = list(names.categories)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # Labels and annotations come from the chart that renders it (commands/crds.py).
        "metadata": {"name": definition.name},
        "spec": {
            "group": definition.group,
            "names": crd_names,
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def custom_resource_definitions(
    definitions: Sequence[CrdDefinition],
) -> dict[str, dict[str, Any]]:
    """CRDs keyed by a file name, `<singular>.yaml`."""
    return {f"{d.names.singular}.yaml": custom_resource_definition(d) for d in definitions}
