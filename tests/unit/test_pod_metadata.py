"""spec.engine.podLabels and spec.engine.podAnnotations: a user's own labels and annotations on
the engine pods, refused where they would collide with the operator's or break Kubernetes'
syntax, and rendered only when set (unset, the pods render as before they existed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llmfleet.models import LLMBatchJobSpec, LLMDeploymentSpec, describe_validation_error
from llmfleet.models.crd import custom_resource_definition
from llmfleet.models.podmeta import OPERATOR_ANNOTATIONS, OPERATOR_LABELS
from llmfleet.models.resources import LLMDEPLOYMENT
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.batchjob import BatchOwner, render_batch_job
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
OWNER = Owner("chat", "team-a", "u-1")
MESH = {"sidecar.istio.io/inject": "false", "cost-center": "ml-42"}
NOTES = {"example.com/owner": "team a <ml@example.com>", "config.linkerd.io/skip": "8000,9000"}


def example(name: str) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())["spec"]
    return body


def with_engine(body: dict[str, Any], **engine: Any) -> dict[str, Any]:
    return {**body, "engine": {**body.get("engine", {}), **engine}}


def pod_templates(body: dict[str, Any]) -> list[dict[str, Any]]:
    s = LLMDeploymentSpec.model_validate(body)
    out = []
    for obj in render_fleet(OWNER, s, plan(s), FLEET).objects():
        if obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            out += [group["leaderTemplate"], group["workerTemplate"]]
        elif obj["kind"] == "Deployment" and not obj["metadata"]["name"].endswith("-router"):
            out.append(obj["spec"]["template"])
    assert out
    return out


ACCEPTED = {
    "prefixed-and-plain-keys": {"podLabels": MESH},
    "empty-label-value": {"podLabels": {"example.com/flag": ""}},
    "longest-label-name-and-value": {"podLabels": {"a" * 63: "b" * 63}},
    "longest-prefix": {"podLabels": {f"{'a' * 60}.{'b' * 60}.{'c' * 60}.{'d' * 70}/x": "y"}},
    "annotation-values-are-free-text": {"podAnnotations": NOTES},
    "other-app-kubernetes-io-labels": {"podLabels": {"app.kubernetes.io/part-of": "chatbot"}},
}


@pytest.mark.parametrize("engine", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_valid_labels_and_annotations_are_accepted(engine: dict[str, Any]) -> None:
    LLMDeploymentSpec.model_validate(with_engine(example("tiny-cpu.yaml"), **engine))


REFUSED = {
    "operator-prefix-label": ({"podLabels": {"llmfleet.dev/deployment": "x"}}, "llmfleet.dev/"),
    "operator-subdomain-annotation": (
        {"podAnnotations": {"team.llmfleet.dev/x": "y"}},
        "llmfleet.dev/",
    ),
    "selector-label": ({"podLabels": {"app.kubernetes.io/component": "x"}}, "select the pods"),
    "managed-by-label": ({"podLabels": {"app.kubernetes.io/managed-by": "me"}}, "select"),
    "scrape-annotation": ({"podAnnotations": {"prometheus.io/port": "9"}}, "metrics scrape"),
    "label-key-with-a-space": ({"podLabels": {"cost center": "x"}}, "qualified names"),
    "label-name-too-long": ({"podLabels": {"a" * 64: "x"}}, "qualified names"),
    "label-prefix-too-long": ({"podLabels": {f"{'a' * 254}/x": "x"}}, "253 characters"),
    "uppercase-prefix": ({"podAnnotations": {"Example.com/x": "y"}}, "qualified names"),
    "annotation-key-empty": ({"podAnnotations": {"": "y"}}, "qualified names"),
    "label-value-with-a-space": ({"podLabels": {"team": "ml ops"}}, "podLabels"),
    "label-value-too-long": ({"podLabels": {"team": "x" * 64}}, "podLabels"),
    "too-many-labels": ({"podLabels": {f"l{i}": "v" for i in range(65)}}, "podLabels"),
}


@pytest.mark.parametrize(("engine", "words"), REFUSED.values(), ids=REFUSED.keys())
def test_colliding_or_malformed_keys_are_refused_naming_the_field(
    engine: dict[str, Any], words: str
) -> None:
    field = next(iter(engine))
    with pytest.raises(ValidationError) as refused:
        LLMDeploymentSpec.model_validate(with_engine(example("tiny-cpu.yaml"), **engine))
    message = describe_validation_error(refused.value)
    assert f"engine.{field}" in message
    assert words in message


def test_the_api_server_checks_the_keys_with_the_same_rules() -> None:
    engine = custom_resource_definition(LLMDEPLOYMENT)["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]["properties"]["spec"]["properties"]["engine"]
    paths = [r["fieldPath"] for r in engine["x-kubernetes-validations"]]
    assert paths.count(".podLabels") == 2
    assert paths.count(".podAnnotations") == 2
    for field in ("podLabels", "podAnnotations"):
        assert engine["properties"][field]["maxProperties"] == 64
        assert "rolls" in engine["properties"][field]["description"]
    assert engine["properties"]["podLabels"]["additionalProperties"]["maxLength"] == 63


@pytest.mark.parametrize("name", ["tiny-cpu.yaml", "llama-3.1-405b-2x8xh100.yaml"])
def test_they_reach_every_engine_pod_beside_the_operators_own(name: str) -> None:
    plain = pod_templates(example(name))
    extra = pod_templates(with_engine(example(name), podLabels=MESH, podAnnotations=NOTES))
    for before, after in zip(plain, extra, strict=True):
        assert after["metadata"]["labels"] == {**before["metadata"]["labels"], **MESH}
        assert after["metadata"]["annotations"] == {
            **before["metadata"].get("annotations", {}),
            **NOTES,
        }
        assert after["spec"] == before["spec"]


def test_they_stay_off_the_objects_and_their_selectors() -> None:
    body = example("llama-3.1-70b-8xh100.yaml")
    s = LLMDeploymentSpec.model_validate(with_engine(body, podLabels=MESH))
    for obj in render_fleet(OWNER, s, plan(s), FLEET).objects():
        assert not set(MESH) & set(obj["metadata"]["labels"]), obj["kind"]
        assert "cost-center" not in str(obj.get("spec", {}).get("selector", {}))


@pytest.mark.parametrize("empty", [{}, {"podLabels": {}, "podAnnotations": {}}], ids=str)
def test_unset_or_empty_renders_the_pods_as_before(empty: dict[str, Any]) -> None:
    body = example("llama-3.1-8b-multipod.yaml")
    assert pod_templates(with_engine(body, **empty)) == pod_templates(body)


def test_a_batch_jobs_pods_get_them_too() -> None:
    batch = yaml.safe_load((EXAMPLES / "batch-tiny-local.yaml").read_text())["spec"]
    s = LLMBatchJobSpec.model_validate(with_engine(batch, podLabels=MESH, podAnnotations=NOTES))
    job = render_batch_job(
        BatchOwner("nightly", "team", "u-1"), s, plan(s.deployment_spec()), FLEET
    )
    meta = job["spec"]["template"]["metadata"]
    assert MESH.items() <= meta["labels"].items()
    assert NOTES.items() <= meta["annotations"].items()
    assert "prometheus.io/scrape" in meta["annotations"]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_key_the_operator_sets_on_a_pod_is_refused_to_users(name: str) -> None:
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    if doc["kind"] == "LLMBatchJob":
        s = LLMBatchJobSpec.model_validate(doc["spec"])
        job = render_batch_job(
            BatchOwner("b", "ns", "u"),
            s,
            plan(s.deployment_spec()),
            OperatorSettings(spare_priority_class="llmfleet-spare").fleet,  # the chart's
        )
        templates = [job["spec"]["template"]]
    else:
        templates = pod_templates(doc["spec"])
    for template in templates:
        meta = template["metadata"]
        own = [k for k in meta["labels"] if not k.startswith("llmfleet.dev/")]
        assert set(own) <= set(OPERATOR_LABELS)
        assert set(meta.get("annotations", {})) <= set(OPERATOR_ANNOTATIONS)
