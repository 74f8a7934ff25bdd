"""One release version everywhere: the package, the CLI, the chart, the image tags and the
changelog agree; and the objects the operator creates carry it where a change restarts no pod."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from changelog import ENGINE_LINE, changelog_releases

from llmfleet import __version__
from llmfleet.cli import main
from llmfleet.models import LLMBatchJobSpec, LLMDeploymentSpec
from llmfleet.models.batchjob import DEFAULT_BATCH_IMAGE
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.batchjob import BatchOwner, render_batch_job
from llmfleet.render.names import VERSION_LABEL
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet

REPO = Path(__file__).resolve().parents[2]
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
# Where a release's image tags are written out for people to copy (a tag starts with a digit:
# placeholders such as <version> are not tags), in any registry (`$REGISTRY/operator:...`).
TAGGED_DOCS = ("README.md", "images/**/*", "docs/*.md", "charts/llmfleet/README.md")
OPERATOR_TAG = re.compile(r"/operator:(\d\S*?)[\s`)]")
VLLM_TAG = re.compile(r"llmfleet/vllm:v[\d.]+-llmfleet(\d\S*?)[\s`),]")


def chart() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "charts/llmfleet/Chart.yaml").read_text())
    return loaded


def test_every_version_carrier_names_the_release() -> None:
    pyproject = tomllib.loads((REPO / "operator/pyproject.toml").read_text())
    carriers = {
        "operator/pyproject.toml": pyproject["project"]["version"],
        "llmfleet.__version__": __version__,
        "Chart.yaml version": chart()["version"],
        "Chart.yaml appVersion": chart()["appVersion"],
        "CHANGELOG.md newest release": changelog_releases()[0][0],
    }
    assert SEMVER.match(__version__), __version__
    assert {name: v for name, v in carriers.items() if v != __version__} == {}


def test_image_tags_written_out_are_the_release() -> None:
    tags: dict[str, set[str]] = {}
    for pattern in TAGGED_DOCS:
        for path in REPO.glob(pattern):
            if path.is_file():
                text = path.read_text()
                for tag in OPERATOR_TAG.findall(text) + VLLM_TAG.findall(text):
                    tags.setdefault(tag, set()).add(str(path.relative_to(REPO)))
    assert set(tags) == {__version__}, tags
    assert DEFAULT_BATCH_IMAGE.endswith(f"-llmfleet{__version__}")


def test_llmfleet_version_prints_the_release(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"llmfleet {__version__}\n"


def test_each_release_says_once_what_upgrading_does_to_engine_pods() -> None:
    releases = changelog_releases()
    assert len(releases) >= 2
    for version, text in releases:
        assert SEMVER.match(version), version
        assert len(ENGINE_LINE.findall(text)) == 1, f"[{version}]: one 'Engine pods: ...' line"
    versions = [tuple(int(n) for n in v.split("-")[0].split(".")) for v, _ in releases]
    assert versions == sorted(versions, reverse=True), "newest release first"


# --- the version label ------------------------------------------------------------------------

H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
EXAMPLES = {
    p.name: yaml.safe_load(p.read_text())
    for p in sorted((REPO / "examples").glob("*.yaml"))
    if not p.name.startswith("batch-")
}
SCALE_TO_ZERO = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "gpus": H100,
    "autoscaling": {"minReplicas": 0, "maxReplicas": 2},
}


def fleet(body: dict[str, Any]) -> list[dict[str, Any]]:
    s = LLMDeploymentSpec.model_validate(body)
    return render_fleet(
        Owner("chat", "team-a", "u-1"),
        s,
        plan(s),
        OperatorSettings(
            engine_network_policy=EngineNetworkPolicy(),
            keda_prometheus_url="http://prometheus.monitoring.svc:9090",
        ).fleet,
    ).objects()


def without_metadata(obj: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in obj.items() if k != "metadata"})


@pytest.mark.parametrize(
    "body",
    [*(doc["spec"] for doc in EXAMPLES.values()), SCALE_TO_ZERO],
    ids=[*EXAMPLES, "scale-to-zero"],
)
def test_the_version_labels_objects_but_no_pod_template_or_selector(
    body: dict[str, Any],
) -> None:
    for obj in fleet(body):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"]["labels"][VERSION_LABEL] == __version__, where
        # Pod templates and selectors live below the object's own metadata.
        assert VERSION_LABEL not in without_metadata(obj), where


def test_engine_deployment_service_and_hpa_carry_the_version() -> None:
    objects = fleet(EXAMPLES["llama-3.1-70b-8xh100.yaml"]["spec"])
    labelled = {o["kind"] for o in objects if o["metadata"]["labels"].get(VERSION_LABEL)}
    assert {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    } <= labelled


def test_a_batch_job_carries_the_version_but_its_pods_do_not() -> None:
    batch = yaml.safe_load((REPO / "examples/batch-tiny-local.yaml").read_text())
    s = LLMBatchJobSpec.model_validate(batch["spec"])
    job = render_batch_job(
        BatchOwner("nightly", "team", "u-1"), s, plan(s.deployment_spec()), FLEET
    )
    assert job["metadata"]["labels"][VERSION_LABEL] == __version__
    assert VERSION_LABEL not in without_metadata(job)
