"""values.yaml, values.schema.json and the chart README agree, and every value is documented."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "llmfleet"
VALUES_TEXT = (CHART / "values.yaml").read_text()
VALUES = yaml.safe_load(VALUES_TEXT)
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
README = (CHART / "README.md").read_text()

# Kubernetes API objects the schema passes through for the API server to validate, and Helm's
# `global`: the only objects whose unknown keys are not refused.
PASS_THROUGH = {
    "/global",
    "/affinity/nodeAffinity",
    "/affinity/podAffinity",
    "/affinity/podAntiAffinity",
    "/definitions/envVar/valueFrom",
    "/definitions/topologySpreadConstraint/labelSelector",
    "/definitions/networkPolicyPeer/podSelector",
    "/definitions/networkPolicyPeer/namespaceSelector",
    "/definitions/networkPolicyPeer/ipBlock",
}
ROW = re.compile(
    r"^\| `(?P<key>[^`]+)` \| (?P<type>[^|]+) \| `(?P<default>[^`]*)` \| (?P<desc>.+) \|$"
)


def leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from leaves(value, path)
        else:
            yield path, value


def readme_rows() -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for line in README.splitlines():
        match = ROW.match(line)
        if match:
            assert match["key"] not in rows, f"README lists {match['key']} twice"
            assert match["desc"].strip(), f"README row {match['key']} has no description"
            rows[match["key"]] = json.loads(match["default"])
    return rows


def test_readme_values_table_matches_values_yaml() -> None:
    in_values = dict(leaves(VALUES))
    in_readme = readme_rows()
    assert sorted(set(in_values) - set(in_readme)) == [], "values missing from the README table"
    assert sorted(set(in_readme) - set(in_values)) == [], "README rows for values that do not exist"
    wrong = {k: (in_readme[k], v) for k, v in in_values.items() if in_readme[k] != v}
    assert wrong == {}, "README default differs from values.yaml (readme, values)"


def test_every_value_has_a_comment_above_it() -> None:
    previous = ""
    undocumented = []
    for number, line in enumerate(VALUES_TEXT.splitlines(), start=1):
        stripped = line.strip()
        if re.match(r"^\s*[A-Za-z0-9_.-]+:", line) and not previous.startswith("#"):
            undocumented.append(f"line {number}: {stripped}")
        if stripped:
            previous = stripped
    assert undocumented == []


def object_schemas(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield path, node
        for key in ("properties", "definitions"):
            for name, child in node.get(key, {}).items():
                yield from object_schemas(
                    child, f"{path}/{name}" if key == "properties" else f"/definitions/{name}"
                )
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from object_schemas(node[key], path)


def test_schema_refuses_unknown_keys_at_every_object_level() -> None:
    open_objects = []
    for path, schema in object_schemas(SCHEMA):
        extra = schema.get("additionalProperties")
        if "additionalProperties" not in schema or (extra is True and path not in PASS_THROUGH):
            open_objects.append(path or "/")
    assert open_objects == []


def test_schema_knows_exactly_the_top_level_values() -> None:
    assert set(SCHEMA["properties"]) - {"global"} == set(VALUES)


@pytest.mark.parametrize("path", sorted(dict(leaves(VALUES))), ids=str)
def test_every_value_is_declared_in_the_schema(path: str) -> None:
    node = SCHEMA
    for part in path.split("."):
        if "$ref" in node:
            node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
        properties = node.get("properties", {})
        if part in properties:
            node = properties[part]
        else:
            assert isinstance(node.get("additionalProperties"), dict), f"{path}: {part} undeclared"
            node = node["additionalProperties"]
