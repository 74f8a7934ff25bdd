"""spec.model.name's documented syntax and the admission limits on names (llmfleet.models)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.deployment import MAX_NAME_LENGTH
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

ACCEPTED = {
    "hugging-face-org-and-name": "meta-llama/Llama-3.1-70B-Instruct",
    "hugging-face-name-only": "gpt2",
    "dots-and-underscores": "Qwen/Qwen2.5-0.5B_Instruct.v2",
    "absolute-path": "/models/llama-3.1-8b",
    "path-beyond-ascii": "/models/modèle",
    "s3-uri": "s3://bucket/models/llama",
    "gcs-uri": "gs://bucket/llama",
}
REFUSED = {
    "space": "my model",
    "three-parts": "org/team/model",
    "relative-path": "./models/llama",
    "id-beyond-ascii": "org/modèle",
    "unsupported-scheme": "ftp://host/model",
    "leading-dash": "-model",
    "newline": "org/model\n",
}


@pytest.mark.parametrize("name", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_model_names_of_the_documented_forms_are_accepted(name: str) -> None:
    LLMDeploymentSpec.model_validate({"model": {"name": name}})


@pytest.mark.parametrize("name", REFUSED.values(), ids=REFUSED.keys())
def test_other_model_names_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        LLMDeploymentSpec.model_validate({"model": {"name": name}})
    assert refused.value.errors()[0]["loc"] == ("model", "name")


def test_every_child_of_the_longest_name_allowed_is_a_valid_service_name() -> None:
    spec = LLMDeploymentSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "gpus": {"count": 8, "memoryGiB": 80, "product": "NVIDIA-H100-80GB-HBM3"},
            "router": {"enabled": True},
        }
    )
    owner = Owner(name="n" * MAX_NAME_LENGTH, namespace="ns", uid="u")
    names = {o["metadata"]["name"] for o in render_fleet(owner, spec, plan(spec), FLEET).objects()}
    assert f"{owner.name}-router" in names
    for name in names:
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
        assert len(name) <= 63, name
