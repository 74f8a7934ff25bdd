"""A model planned from its config.json: the same plan as with the figures typed in, where the
figures came from in the reason, and each way of not getting config.json named in the field
to change (the operator's reads through ModelConfigs, `llmfleet plan`'s through its flags)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubstub import Answer, HubStub, hub_stub
from kubernetes import client as k8s

from llmfleet.catalog.hfconfig import architecture_from_config
from llmfleet.cli import main
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import PlanError, plan
from llmfleet.reconcile.machinery.errors import UnavailableError
from llmfleet.reconcile.machinery.modelconfig import ModelConfigs

CONFIG_FILE = Path(__file__).parent / "data/llama-3.1-8b-config.json"
CONFIG = json.loads(CONFIG_FILE.read_text())
REPO = "acme-labs/llama-8b-ft"
GPUS = {"count": 2, "profile": "h100-80gb"}


def spec(**model: Any) -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({"model": {"name": REPO, **model}, "gpus": GPUS})


@pytest.fixture
def hub() -> Iterator[HubStub]:
    with hub_stub() as stub:
        yield stub


def test_a_plan_from_config_json_is_the_plan_from_the_same_figures_typed_in() -> None:
    typed = architecture_from_config(CONFIG).model_dump(by_alias=True)

    by_hand = plan(spec(architecture=typed, revision="v1"))
    fetched = plan(spec(revision="v1"), model_config=CONFIG)

    # Only the words saying where the figures came from differ.
    where = {"reason", "weights_format"}
    assert fetched.model_dump(exclude=where) == by_hand.model_dump(exclude=where)
    assert (
        fetched.weights_format
        == f"16-bit (config.json of {REPO}@v1, which has no quantization_config)"
    )
    assert fetched.predicted is not None
    assert fetched.reason.startswith(f"Architecture from config.json of {REPO}@v1. ")
    assert by_hand.reason.startswith("Architecture from spec.model.architecture. ")


@pytest.mark.parametrize(
    ("model", "source"),
    [
        pytest.param(
            {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "the built-in catalog", id="catalog"
        ),
        pytest.param(
            {
                "name": "meta-llama/Llama-3.1-8B-Instruct",
                "architecture": {
                    **architecture_from_config(CONFIG).model_dump(by_alias=True),
                    "numLayers": 16,
                },
            },
            "spec.model.architecture",
            id="the-spec-overrides-the-catalog",
        ),
    ],
)
def test_the_spec_then_the_catalog_win_over_config_json(model: dict[str, Any], source: str) -> None:
    planned = plan(
        LLMDeploymentSpec.model_validate({"model": model, "gpus": GPUS}), model_config={}
    )

    assert planned.reason.startswith(f"Architecture from {source}. ")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        pytest.param("/models/llama", "is a path in the container", id="path"),
        pytest.param("s3://bucket/llama", "is an object-store URI", id="s3"),
        pytest.param(REPO, f"no config.json of {REPO}@main was given", id="repo-id-not-read"),
    ],
)
def test_without_config_json_the_error_names_the_architecture_field(name: str, said: str) -> None:
    with pytest.raises(PlanError) as raised:
        plan(spec(name=name))

    assert raised.value.field == "spec.model.architecture"
    assert said in raised.value.message


def test_a_config_json_of_an_unmodelled_model_is_refused_with_its_message() -> None:
    with pytest.raises(PlanError) as raised:
        plan(spec(), model_config={**CONFIG, "architectures": ["MambaForCausalLM"]})

    assert (raised.value.field, raised.value.reason) == (
        "spec.model.architecture",
        "ModelConfigUnsupported",
    )
    assert f"config.json of {REPO}@main: MambaForCausalLM" in raised.value.message


@pytest.mark.parametrize("revision", [None, "v1.1"])
def test_vllm_gets_the_revision_only_when_one_is_set(revision: str | None) -> None:
    args = plan(spec(revision=revision), model_config=CONFIG).vllm_args

    given = [args[i + 1] for i, arg in enumerate(args) if arg == "--revision"]
    assert given == ([revision] if revision else [])


def configs(hub: HubStub) -> ModelConfigs:
    """ModelConfigs whose Hub and API server are both the stand-in (it serves the Secret)."""
    return ModelConfigs(k8s.ApiClient(k8s.Configuration(host=hub.url)), hub.url)


def serve_secret(hub: HubStub, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"}, "data": encoded}
    hub.answers["/api/v1/namespaces/team/secrets/hf"] = Answer(body=json.dumps(body).encode())


def test_the_operator_sends_the_token_of_token_secret_ref(hub: HubStub) -> None:
    serve_secret(hub, {"token": "hf_team"})
    hub.serve_config(REPO, CONFIG)
    model = spec(tokenSecretRef={"name": "hf", "key": "token"}).model

    assert configs(hub).for_model(model, "team") == CONFIG
    assert configs(hub).for_model(spec(name="meta-llama/Llama-3.1-8B").model, "team") is None
    (asked,) = hub.asked(REPO)
    assert asked["Authorization"] == "Bearer hf_team"


@pytest.mark.parametrize(
    ("model", "answer", "field", "reason", "said"),
    [
        pytest.param(
            {},
            Answer(401, headers={"X-Error-Code": "GatedRepo"}),
            "spec.model.tokenSecretRef",
            "ModelConfigDenied",
            "set spec.model.tokenSecretRef",
            id="gated-without-a-token",
        ),
        pytest.param(
            {"tokenSecretRef": {"name": "hf", "key": "token"}},
            Answer(403),
            "spec.model.tokenSecretRef",
            "ModelConfigDenied",
            "the token in Secret hf (key token) was refused",
            id="token-refused",
        ),
        pytest.param(
            {"tokenSecretRef": {"name": "hf", "key": "other"}},
            Answer(401),
            "spec.model.tokenSecretRef",
            "ModelConfigDenied",
            "asked without a token because Secret hf has no key other",
            id="key-missing",
        ),
        pytest.param(
            {"revision": "v9"},
            Answer(404, headers={"X-Error-Code": "RevisionNotFound"}),
            "spec.model.revision",
            "ModelConfigNotFound",
            f"no config.json of {REPO}@v9",
            id="no-such-revision",
        ),
        pytest.param(
            {},
            Answer(404, headers={"X-Error-Code": "RepoNotFound"}),
            "spec.model.name",
            "ModelConfigNotFound",
            "check spec.model.name",
            id="no-such-repo",
        ),
    ],
)
def test_each_refusal_names_the_field_to_change(
    hub: HubStub, model: dict[str, Any], answer: Answer, field: str, reason: str, said: str
) -> None:
    serve_secret(hub, {"token": "hf_team"})
    hub.answer(REPO, answer, revision=model.get("revision", "main"))

    with pytest.raises(PlanError) as raised:
        configs(hub).for_model(spec(**model).model, "team")

    assert (raised.value.field, raised.value.reason) == (field, reason)
    assert said in raised.value.message
    assert hub.url in raised.value.message


def test_a_hub_that_fails_is_unavailable_for_now_naming_the_url(hub: HubStub) -> None:
    hub.answer(REPO, Answer(502))

    with pytest.raises(UnavailableError) as raised:
        configs(hub).for_model(spec().model, "team")

    assert raised.value.reason == "ModelConfigUnavailable"
    assert f"{hub.url}/{REPO}/resolve/main/config.json answered 502" in str(raised.value)


MANIFEST = f"""
apiVersion: llmfleet.dev/v1alpha1
kind: LLMDeployment
metadata: {{name: ft}}
spec:
  model: {{name: {REPO}}}
  gpus: {{count: 2, profile: h100-80gb}}
"""


@pytest.fixture
def manifest(hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MANIFEST in a file, for a plan CLI whose Hub (HF_ENDPOINT) is the stub."""
    path = tmp_path / "ft.yaml"
    path.write_text(MANIFEST)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    return path


def test_plan_cli_reads_model_config_or_the_hub_of_hf_endpoint(
    hub: HubStub,
    manifest: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_mine")
    hub.serve_config(REPO, CONFIG)

    assert (
        main(["plan", "-f", str(manifest), "-o", "json", "--model-config", str(CONFIG_FILE)]) == 0
    )
    offline = json.loads(capsys.readouterr().out)
    assert hub.requests == []
    assert main(["plan", "-f", str(manifest), "-o", "json"]) == 0
    online = json.loads(capsys.readouterr().out)

    assert online == offline
    assert f"config.json of {REPO}@main" in online["reason"]
    (asked,) = hub.asked(REPO)
    assert asked["Authorization"] == "Bearer hf_mine"


def test_plan_cli_says_how_to_plan_without_the_hub(
    hub: HubStub,
    manifest: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.answer(REPO, Answer(401))

    assert main(["plan", "-f", str(manifest)]) == 2

    err = capsys.readouterr().err
    assert f"spec.model.architecture: cannot read config.json of {REPO}@main" in err
    assert "set HF_TOKEN" in err
    assert "--model-config FILE" in err


def test_plan_cli_reads_the_config_json_of_a_model_folder_on_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "models" / "support-ft"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(CONFIG_FILE.read_text())
    manifest = tmp_path / "ft.yaml"
    manifest.write_text(MANIFEST.replace(f"name: {REPO}}}", f"name: {folder}}}"))

    assert main(["plan", "-f", str(manifest), "-o", "json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert (
        main(["plan", "-f", str(manifest), "-o", "json", "--model-config", str(CONFIG_FILE)]) == 0
    )
    given = json.loads(capsys.readouterr().out)

    assert local == given
    assert local["tensorParallelSize"] >= 1
