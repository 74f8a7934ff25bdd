"""The generated CRD: structural and documented (tests/unit/test_chart_crds.py keeps the chart's
templates in sync with it)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from llmfleet.models import DEFAULT_ENGINE_IMAGE
from llmfleet.models.base import ApiModel
from llmfleet.models.crd import SchemaConversionError, custom_resource_definition, openapi_schema
from llmfleet.models.resources import LLMDEPLOYMENT


def crd() -> dict[str, Any]:
    return custom_resource_definition(LLMDEPLOYMENT)


def root_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def all_keys(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from all_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from all_keys(item)


@pytest.mark.parametrize(
    "forbidden", ["$ref", "$defs", "title", "anyOf", "allOf", "oneOf", "const", "examples"]
)
def test_schema_has_no_json_schema_only_keywords(forbidden: str) -> None:
    assert forbidden not in set(all_keys(root_schema()))


def test_every_property_has_a_description() -> None:
    # The API server allows nothing but `type: object` on the root metadata.
    undocumented = [
        path
        for path, node in walk(root_schema(), "")
        if path not in ("", ".metadata") and not path.endswith(("[]", "{}"))
        if not node.get("description")
    ]
    assert undocumented == []


def test_every_level_has_a_single_type() -> None:
    untyped = [
        path
        for path, node in walk(root_schema(), "")
        if not isinstance(node.get("type"), str) or node["type"] == "null"
    ]
    assert untyped == []


def test_exclusive_bounds_use_openapi_v3_booleans() -> None:
    utilization = root_schema()["properties"]["spec"]["properties"]["engine"]["properties"][
        "gpuMemoryUtilization"
    ]

    assert utilization["exclusiveMinimum"] is True
    assert (utilization["minimum"], utilization["maximum"]) == (0, 1)


def test_objects_with_properties_do_not_also_declare_additional_properties() -> None:
    both = [
        path
        for path, node in walk(root_schema(), "")
        if "properties" in node and "additionalProperties" in node
    ]
    assert both == []


def test_optional_fields_are_nullable_and_keep_defaults() -> None:
    engine = root_schema()["properties"]["spec"]["properties"]["engine"]["properties"]

    assert engine["maxNumSeqs"]["nullable"] is True
    assert "default" not in engine["maxNumSeqs"]
    # No default: the API server would store it, and the operator's could never apply.
    assert "default" not in engine["image"]
    assert DEFAULT_ENGINE_IMAGE in engine["image"]["description"]
    assert engine["schedulingPolicy"]["enum"] == ["fcfs", "priority"]


def cel_rules_in_schema() -> dict[str, list[str]]:
    return {
        path: [rule["message"] for rule in node["x-kubernetes-validations"]]
        for path, node in walk(root_schema(), "")
        if "x-kubernetes-validations" in node
    }


@pytest.mark.parametrize(
    ("path", "message_start"),
    [
        pytest.param(".spec", "strategy SinglePod needs", id="single-pod-on-one-node"),
        pytest.param(".spec.gpus", "count must be at most perNode", id="whole-nodes"),
        pytest.param(".spec.autoscaling", "maxReplicas must be", id="replica-bounds"),
        pytest.param(".spec.autoscaling", "idleSeconds and wakeTimeout", id="zero-only-knobs"),
        pytest.param(".spec.autoscaling", "minReplicas 0 (scale to zero)", id="zero-needs-hpa"),
        pytest.param(".spec", "autoscaling.minReplicas 0 needs the router", id="zero-router"),
        pytest.param(".spec.model.architecture", "numKeyValueHeads must", id="gqa"),
        pytest.param(".spec.engine", "extraArgs must not set", id="reserved-flags"),
        pytest.param(".spec", "adapters must have unique names", id="adapter-names-unique"),
        pytest.param(".spec", "adapters must not be named as", id="adapter-not-the-base"),
        pytest.param(".spec.engine.lora", "maxCpuAdapters must be at least", id="lora-cache"),
        pytest.param(".spec", "adapters with a source under /adapters", id="adapter-claim-path"),
    ],
)
def test_cross_field_rules_reach_the_api_server(path: str, message_start: str) -> None:
    messages = cel_rules_in_schema().get(path, [])
    assert any(message.startswith(message_start) for message in messages), messages


@pytest.mark.parametrize(
    "optional",
    [
        "self.minReplicas",
        "self.maxNumSeqs",
        "self.engine",
        "self.engine.maxModelLen",
        "self.model.architecture",
        "self.gpus",
        "self.extraArgs",
        "self.requests",
        "self.adapters",
        "self.maxCpuAdapters",
        "self.maxAdapters",
        "self.model.servedModelName",
        "self.engine.lora",
        "self.engine.lora.claim",
    ],
)
def test_cel_rules_guard_optional_fields_with_has(optional: str) -> None:
    # Reading an absent field is a runtime error in CEL, which the API server reports as a
    # validation failure of an otherwise valid object.
    rules = [
        rule["rule"]
        for _, node in walk(root_schema(), "")
        for rule in node.get("x-kubernetes-validations", [])
        if optional in rule["rule"]
    ]
    assert rules
    assert all(f"has({optional})" in rule for rule in rules), rules


def test_crd_registers_names_columns_and_status() -> None:
    spec = crd()["spec"]
    version = spec["versions"][0]

    assert crd()["metadata"]["name"] == "llmdeployments.llmfleet.dev"
    assert spec["names"]["shortNames"] == ["llmd"]
    assert spec["names"]["categories"] == ["llmfleet"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]] == [
        ("Strategy", ".status.plan.strategy"),
        ("Replicas", ".status.replicas"),
        ("Ready", ".status.readyReplicas"),
        ("GPUs", ".status.gpus"),
        ("Available", '.status.conditions[?(@.type=="Available")].status'),
        ("Reason", '.status.conditions[?(@.type=="Available")].reason'),
        ("Age", ".metadata.creationTimestamp"),
        ("Message", '.status.conditions[?(@.type=="Available")].message'),
    ]


def test_printer_columns_point_at_status_fields() -> None:
    status = root_schema()["properties"]["status"]
    for column in crd()["spec"]["versions"][0]["additionalPrinterColumns"]:
        # A filter on a list ([?(@.type=="Available")]) selects one of its items.
        path = re.sub(r"\[\?\(@\.type==\"\w+\"\)\]", "[]", column["jsonPath"])
        parts = path.split(".")[1:]
        if parts[0] != "status":
            continue
        node = status
        for part in parts[1:]:
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]
        assert node["type"] == column["type"], column


def test_conditions_merge_by_type() -> None:
    conditions = root_schema()["properties"]["status"]["properties"]["conditions"]

    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]


class _Undocumented(ApiModel):
    count: int


class _Union(ApiModel):
    """Has a union the API server cannot express."""

    value: int | str = 0


@pytest.mark.parametrize(
    ("model", "complaint"),
    [
        pytest.param(_Undocumented, "count: has no description", id="missing-description"),
        pytest.param(_Union, "unions other than", id="non-nullable-union"),
    ],
)
def test_generator_refuses_models_it_cannot_express(model: type[ApiModel], complaint: str) -> None:
    with pytest.raises(SchemaConversionError, match=complaint):
        openapi_schema(model)
