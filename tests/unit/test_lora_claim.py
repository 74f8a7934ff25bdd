"""spec.engine.lora.claim: a claim of adapters mounted read-only at /adapters in every engine
container of every layout, refused at admission where a source needs it and it is unset, and
named in status when it is missing."""

from __future__ import annotations

from typing import Any

import pytest
from loralayouts import H100, LAYOUTS, MODEL, engine_pod_templates, vllm, with_lora
from pydantic import ValidationError
from stuckpods import unschedulable

from llmfleet.models import LLMBatchJobSpec, LLMDeploymentSpec, field_problems
from llmfleet.planner import plan
from llmfleet.reconcile.machinery.pod_blockers import blockers
from llmfleet.reconcile.machinery.references import deployment_references

CLAIM = {"claimName": "team-adapters"}
VOLUME = {
    "name": "lora-adapters",
    "persistentVolumeClaim": {"claimName": "team-adapters", "readOnly": True},
}
MOUNT = {"name": "lora-adapters", "mountPath": "/adapters", "readOnly": True}
ADAPTER = {"name": "sql", "source": "/adapters/sql"}
# What the scheduler says of a pod whose claim does not exist.
CLAIM_MISSING = unschedulable(
    '0/4 nodes are available: persistentvolumeclaim "team-adapters" not found.'
)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_every_engine_container_mounts_the_claim_read_only_at_adapters(
    layout: dict[str, Any],
) -> None:
    templates = engine_pod_templates(with_lora(layout, claim=CLAIM))

    assert templates
    for where, template in templates.items():
        assert VOLUME in template["spec"]["volumes"], where
        assert MOUNT in vllm(template)["volumeMounts"], where


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_claim_adds_its_volume_and_nothing_else_to_the_pods(layout: dict[str, Any]) -> None:
    without = engine_pod_templates(with_lora(layout))
    with_claim = engine_pod_templates(with_lora(layout, claim=CLAIM))

    assert without.keys() == with_claim.keys()
    for where, template in with_claim.items():
        template["spec"]["volumes"].remove(VOLUME)
        vllm(template)["volumeMounts"].remove(MOUNT)
        assert template == without[where], where


def problems(body: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        LLMDeploymentSpec.model_validate(body)
    return [str(problem) for problem in field_problems(caught.value)]


@pytest.mark.parametrize(
    "source",
    ["/adapters/sql", "/adapters", "/adapters/team/sql/v2"],
    ids=["under-it", "its-root", "deeper"],
)
def test_a_source_under_adapters_is_refused_without_the_claim(source: str) -> None:
    adapters = [{"name": "sql", "source": source}]

    found = problems({"model": MODEL, "adapters": adapters})
    accepted = with_lora({"model": MODEL, "adapters": adapters}, claim=CLAIM)

    assert any(
        p.startswith("spec.adapters: adapters with a source under /adapters need") for p in found
    )
    assert accepted.adapters[0].source == source


@pytest.mark.parametrize(
    "source",
    ["/adaptersets/sql", "/models/adapters/sql", "org/sql-lora"],
    ids=["a-longer-directory", "elsewhere", "hub-id"],
)
def test_other_sources_need_no_claim(source: str) -> None:
    spec = LLMDeploymentSpec.model_validate(
        {"model": MODEL, "adapters": [{"name": "sql", "source": source}]}
    )

    assert spec.engine.lora is None


@pytest.mark.parametrize(
    "claim",
    [{"claimName": "Team_Adapters"}, {"claimName": ""}, {}],
    ids=["not-a-dns-name", "empty", "no-name"],
)
def test_a_malformed_claim_is_refused_naming_the_field(claim: dict[str, str]) -> None:
    found = problems({"model": MODEL, "engine": {"lora": {"claim": claim}}})

    assert any(p.startswith("spec.engine.lora.claim.claimName") for p in found), found


def test_a_batch_job_cannot_set_the_claim() -> None:
    job = {
        "model": MODEL,
        "engine": {"lora": {"claim": CLAIM}},
        "input": {"configMap": {"name": "in", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "out", "path": "out.jsonl"}},
    }
    with pytest.raises(ValidationError) as caught:
        LLMBatchJobSpec.model_validate(job)

    assert any(str(p).startswith("spec.engine.lora") for p in field_problems(caught.value))


def test_a_missing_claim_is_named_by_its_field() -> None:
    spec = with_lora(
        {"model": {**MODEL, "cache": {"claimName": "hf"}}, "gpus": H100, "adapters": [ADAPTER]},
        claim=CLAIM,
    )
    (found,) = blockers([CLAIM_MISSING], deployment_references(spec, plan(spec)))

    assert (found.field, found.reason, found.cause) == (
        "spec.engine.lora.claim.claimName",
        "AdapterClaimNotFound",
        'persistentvolumeclaim "team-adapters" not found',
    )


def test_one_claim_for_the_model_cache_and_the_adapters_names_both_fields() -> None:
    spec = with_lora({"model": {**MODEL, "cache": CLAIM}, "gpus": H100}, claim=CLAIM)
    (found,) = blockers([CLAIM_MISSING], deployment_references(spec, plan(spec)))

    assert found.field == "spec.model.cache.claimName and spec.engine.lora.claim.claimName"
