"""Rendering the Helm chart without a cluster (`helm template`, built by `make tools`), and
picking the operator's objects out of what it renders: shared by the unit tests of the chart and
the lab's test of the node runner's OCI bundle for the operator pod."""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "llmfleet"
BUILD_TOOLS = REPO / "dev" / "localcluster" / "build-tools.sh"
RELEASE = "fleet"


@cache
def helm() -> str:
    bindir = subprocess.run(
        [str(BUILD_TOOLS), "--bindir", "helm"], check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(bindir) / "helm"
    if not path.is_file():
        pytest.skip(f"helm is not built yet ({path}); run `make tools`")
    return str(path)


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    # No cluster and no user state: helm template must work offline.
    env = {**os.environ, "KUBECONFIG": os.devnull, "HELM_CACHE_HOME": "/tmp/llmfleet-helm-cache"}
    return subprocess.run([helm(), *args], capture_output=True, text=True, env=env, check=False)


def render(
    *set_args: str, chart: Path = CHART, api_versions: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(chart), "--namespace", "llmfleet-system"]
    for value in set_args:
        args += ["--set", value]
    for api in api_versions:
        args += ["--api-versions", api]
    result = run_helm(*args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] in kinds]


def operator_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(docs, "Deployment")
    return deployment


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = operator_deployment(docs)["spec"]["template"]["spec"]["containers"]
    (container,) = [c for c in containers if c["name"] == "operator"]
    return container


def refusal(*set_args: str) -> str:
    """What `helm template` says refusing these values (it must refuse them)."""
    args = ["template", RELEASE, str(CHART)]
    for value in set_args:
        args += ["--set", value]
    result = run_helm(*args)
    assert result.returncode != 0, result.stdout
    return result.stderr
