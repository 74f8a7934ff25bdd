"""spec.adapters and spec.engine.lora: what a manifest may say, refused with the field named
as the API server names it (tests/api/test_llmdeployment.py has the API server's side)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llmfleet.models import LLMBatchJobSpec, LLMDeploymentSpec, field_problems
from llmfleet.models.crd import custom_resource_definition
from llmfleet.models.resources import LLMDEPLOYMENT

MODEL = {"name": "meta-llama/Llama-3.1-8B-Instruct"}


def adapter(name: str = "sql", source: str = "org/sql-lora") -> dict[str, str]:
    return {"name": name, "source": source}


def problems(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        LLMDeploymentSpec.model_validate({"model": MODEL, **spec})
    return [str(problem) for problem in field_problems(caught.value)]


@pytest.mark.parametrize(
    "source",
    [
        "org/sql-lora",
        "sql-lora",
        "/models/adapters/sql",
        "/mnt/cache/org--sql/snapshots/abc",
        "s3://team-adapters/llama/sql/v3",
        "s3://team-adapters",
        "gs://team.adapters/sql/",
    ],
    ids=["hub-org-name", "hub-name", "claim-path", "snapshot-path", "s3", "s3-bucket", "gs"],
)
def test_adapter_sources_the_engines_can_load_are_accepted(source: str) -> None:
    spec = LLMDeploymentSpec.model_validate({"model": MODEL, "adapters": [adapter(source=source)]})

    assert spec.adapters[0].source == source


@pytest.mark.parametrize(
    "revision", ["v2", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567"]
)
def test_a_hub_adapter_may_name_a_revision(revision: str) -> None:
    spec = LLMDeploymentSpec.model_validate(
        {"model": MODEL, "adapters": [{**adapter(), "revision": revision}]}
    )

    assert spec.adapters[0].revision == revision


def test_an_object_store_is_described_by_endpoint_region_and_secret() -> None:
    store = {"endpoint": "https://minio.storage:9000", "region": "eu-west-1", "secretRef": "s3"}
    spec = LLMDeploymentSpec.model_validate(
        {"model": MODEL, "engine": {"lora": {"objectStore": store}}}
    )

    assert spec.engine.lora is not None
    assert spec.engine.lora.object_store is not None
    assert spec.engine.lora.object_store.secret_ref == "s3"


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        pytest.param(adapter(source="s3://B/sql"), "spec.adapters[0].source", id="s3-upper"),
        pytest.param(adapter(source="s3:/bucket/sql"), "spec.adapters[0].source", id="s3-slash"),
        pytest.param(adapter(source="azure://c/sql"), "spec.adapters[0].source", id="azure"),
        pytest.param(adapter(source="gs://b/sql x"), "spec.adapters[0].source", id="gs-space"),
        pytest.param(adapter(source="org/a/b"), "spec.adapters[0].source", id="three-segments"),
        pytest.param(adapter(source="adapters/sql x"), "spec.adapters[0].source", id="space"),
        pytest.param(adapter(source="relative/../x"), "spec.adapters[0].source", id="dotdot"),
        pytest.param(adapter(name="org/sql"), "spec.adapters[0].name", id="name-with-slash"),
        pytest.param(adapter(name="-sql"), "spec.adapters[0].name", id="name-leading-dash"),
        pytest.param(adapter(name="s" * 129), "spec.adapters[0].name", id="name-too-long"),
        pytest.param({"name": "sql"}, "spec.adapters[0].source", id="no-source"),
        pytest.param(
            {**adapter(source="/adapters/sql"), "revision": "v2"},
            "spec.adapters[0].revision",
            id="revision-of-a-path",
        ),
        pytest.param(
            {**adapter(source="s3://bucket/sql"), "revision": "v2"},
            "spec.adapters[0].revision",
            id="revision-of-s3",
        ),
        pytest.param({**adapter(), "revision": "-x"}, "spec.adapters[0].revision", id="bad-ref"),
    ],
)
def test_malformed_adapters_are_refused_naming_the_field(bad: dict[str, str], field: str) -> None:
    found = problems({"adapters": [bad]})

    assert any(problem.startswith(f"{field}:") for problem in found), found


@pytest.mark.parametrize(
    ("store", "field"),
    [
        ({"endpoint": "minio:9000"}, "endpoint"),
        ({"endpoint": "ftp://minio:9000"}, "endpoint"),
        ({"region": "EU West"}, "region"),
        ({"secretRef": "Not_A_Name"}, "secretRef"),
        ({"secretRef": {"name": "s3"}}, "secretRef"),
        ({"bucket": "b"}, "bucket"),
    ],
)
def test_a_malformed_object_store_is_refused_naming_the_field(
    store: dict[str, Any], field: str
) -> None:
    found = problems({"engine": {"lora": {"objectStore": store}}})

    assert any(p.startswith(f"spec.engine.lora.objectStore.{field}") for p in found), found


@pytest.mark.parametrize(
    ("spec", "message_start"),
    [
        pytest.param(
            {"adapters": [adapter(), adapter(source="/other")]},
            "spec.adapters: adapters must have unique names",
            id="duplicate-names",
        ),
        pytest.param(
            {"model": {**MODEL, "servedModelName": "chat"}, "adapters": [adapter(name="chat")]},
            "spec.adapters: adapters must not be named as the base model is served",
            id="named-as-the-served-name",
        ),
        pytest.param(
            {"model": {"name": "chat"}, "adapters": [adapter(name="chat")]},
            "spec.adapters: adapters must not be named as the base model is served",
            id="named-as-the-model",
        ),
        pytest.param(
            {"adapters": [adapter(name=f"a{i}") for i in range(65)]},
            "spec.adapters: ",
            id="more-than-64",
        ),
        pytest.param(
            {"engine": {"lora": {"maxAdapters": 8, "maxCpuAdapters": 4}}},
            "spec.engine.lora.maxCpuAdapters: maxCpuAdapters must be at least maxAdapters",
            id="cpu-cache-below-slots",
        ),
        pytest.param(
            {"engine": {"lora": {"maxCpuAdapters": 2}}},
            "spec.engine.lora.maxCpuAdapters: maxCpuAdapters must be at least maxAdapters "
            "(default 4)",
            id="cpu-cache-below-default-slots",
        ),
        pytest.param(
            {"engine": {"lora": {"maxRank": 24}}}, "spec.engine.lora.maxRank", id="odd-rank"
        ),
        pytest.param(
            {"engine": {"lora": {"maxAdapters": 65}}},
            "spec.engine.lora.maxAdapters",
            id="too-many-slots",
        ),
    ],
)
def test_cross_field_rules_refuse_naming_the_field(
    spec: dict[str, Any], message_start: str
) -> None:
    found = problems(spec)

    assert any(problem.startswith(message_start) for problem in found), found


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [
        pytest.param({}, False, id="neither"),
        pytest.param({"engine": {"lora": {}}}, True, id="engine-lora"),
        pytest.param({"adapters": [adapter()]}, True, id="adapters"),
        pytest.param({"engine": {"extraArgs": ["--enable_lora"]}}, True, id="extra-arg"),
        pytest.param({"engine": {"extraArgs": ["--max-loras", "2"]}}, False, id="other-flags"),
    ],
)
def test_lora_is_enabled_by_engine_lora_adapters_or_the_flag(
    spec: dict[str, Any], enabled: bool
) -> None:
    assert LLMDeploymentSpec.model_validate({"model": MODEL, **spec}).lora_enabled is enabled


def test_a_batch_job_refuses_engine_lora() -> None:
    job = {
        "model": MODEL,
        "engine": {"lora": {}},
        "input": {"configMap": {"name": "in", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "out", "path": "out.jsonl"}},
    }
    with pytest.raises(ValidationError) as caught:
        LLMBatchJobSpec.model_validate(job)

    (problem,) = field_problems(caught.value)
    assert str(problem).startswith("spec.engine.lora: engine.lora is for an LLMDeployment's")


def test_adapters_are_accepted_on_engines_behind_an_api_key() -> None:
    key = {"name": "api-keys", "key": "key"}
    spec = LLMDeploymentSpec.model_validate(
        {"model": MODEL, "engine": {"apiKeySecretRef": key}, "adapters": [adapter()]}
    )
    rules = custom_resource_definition(LLMDEPLOYMENT)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]["properties"]["spec"]["x-kubernetes-validations"]

    assert spec.engine.api_key_secret_ref is not None
    assert [r["rule"] for r in rules if "apiKeySecretRef" in r["rule"]] == []
