"""The lab's node runner admits what it can really run; an image rebuilt under an older pod
template fails as a kubelet's pull fails (Pending, ErrImagePull), not as a refused pod."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from localcluster.noderunner import admission
from localcluster.noderunner.images import REF_ANNOTATION

BUILT = "docker.io/llmfleet/operator:0.2.0"


@pytest.fixture(autouse=True)
def images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = {"manifests": [{"digest": "sha256:new", "annotations": {REF_ANNOTATION: BUILT}}]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    with tarfile.open(tmp_path / "operator.oci.tar", "w") as tar:
        tar.add(tmp_path / "index.json", arcname="index.json")
    monkeypatch.setenv("LLMFLEET_IMAGES_OUT", str(tmp_path))


def pod(image: str, gpus: int = 0) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "main", "image": image, "resources": resources}]},
    }


@pytest.mark.parametrize(
    "image",
    [BUILT, "docker.io/llmfleet/operator@sha256:new", "llmfleet/operator:0.2.0"],
)
def test_a_pod_of_a_built_image_is_admitted(image: str) -> None:
    assert admission.refusal(pod(image), "local-system-0") is None


def test_a_gpu_pod_is_admitted_whatever_its_image() -> None:
    assert admission.refusal(pod("vllm/vllm-openai:v0.32.0", gpus=1), "local-0") is None


@pytest.mark.parametrize(
    "image", ["docker.io/llmfleet/operator@sha256:old", "llmfleet/operator:0.1.0"]
)
def test_a_rebuilt_image_leaves_the_pod_pending_in_err_image_pull_naming_the_built_one(
    image: str,
) -> None:
    refused = admission.refusal(pod(image), "local-system-0")
    assert refused is not None
    assert refused.status["phase"] == "Pending"
    (status,) = refused.status["containerStatuses"]
    waiting = status["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert image in waiting["message"]
    assert "sha256:new" in waiting["message"]


def test_a_pod_this_machine_cannot_run_fails_saying_what_runs_here() -> None:
    refused = admission.refusal(pod("docker.io/library/nginx:1"), "local-system-0")
    assert refused is not None
    assert refused.status["phase"] == "Failed"
    assert refused.status["reason"] == "NodeRunnerRejected"
    assert "nvidia.com/gpu" in refused.status["message"]
    assert "built here" in refused.status["message"]
