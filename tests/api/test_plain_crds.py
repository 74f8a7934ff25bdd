"""The repository's crds/ (the plain CRDs, for those who install them without Helm) applied as the
README says, `kubectl apply --server-side -f crds/`, against the tier's API server.

The tier's chart fixture has installed the same CRDs with Helm, and the API server has one copy of
each, so the test applies over them: what a user does who moves the CRDs of a running release to
GitOps (upgrade it with crds.enabled=false, the CRDs kept, then apply crds/), or who applies
crds/ of the version a release already installed. The apply must succeed without
--force-conflicts (the same values under another field manager are shared, not conflicting) and
leave the CRDs as they were. A field manager of the test's own, as a GitOps controller has one,
lets the test hand its fields back afterwards, so the release's CRDs are as the other tests
expect them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster.supervisor import Cluster

pytestmark = pytest.mark.cluster

PLAIN = Path(__file__).resolve().parents[2] / "crds"
MANAGER = "llmfleet-test-plain-crds"


def plain_crds() -> dict[str, dict[str, Any]]:
    docs = [yaml.safe_load(p.read_text()) for p in sorted(PLAIN.glob("*.yaml"))]
    return {doc["metadata"]["name"]: doc for doc in docs}


def live_crd(cluster: Cluster, name: str) -> dict[str, Any]:
    live: dict[str, Any] = json.loads(
        cluster.kubectl("get", "crd", name, "--output=json", "--show-managed-fields")
    )
    return live


def kubectl_apply(cluster: Cluster, *args: str, input: str | None = None) -> str:
    result = subprocess.run(
        [str(cluster.kubectl_path()), f"--kubeconfig={cluster.kubeconfig}", "apply", *args],
        capture_output=True,
        text=True,
        input=input,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl apply {' '.join(args)}\n{result.stderr}"
    return result.stdout


@pytest.fixture
def gitops_manager(cluster: Cluster) -> Iterator[str]:
    """The field manager the test applies with; its fields handed back afterwards (an apply of
    the name alone releases every field it held, which the release's Helm also owns)."""
    before = {name: live_crd(cluster, name)["spec"] for name in plain_crds()}
    yield MANAGER
    stubs = [
        {"apiVersion": crd["apiVersion"], "kind": crd["kind"], "metadata": {"name": name}}
        for name, crd in plain_crds().items()
    ]
    kubectl_apply(
        cluster,
        "--server-side",
        f"--field-manager={MANAGER}",
        "-f",
        "-",
        input=yaml.safe_dump_all(stubs),
    )
    for name, spec in before.items():
        live = live_crd(cluster, name)
        assert MANAGER not in {f["manager"] for f in live["metadata"]["managedFields"]}
        assert live["spec"] == spec, f"{name}: handing the fields back changed the CRD"


def test_kubectl_server_side_apply_of_crds_succeeds_over_the_releases_crds(
    cluster: Cluster, gitops_manager: str
) -> None:
    crds = plain_crds()
    assert sorted(crds) == ["llmbatchjobs.llmfleet.dev", "llmdeployments.llmfleet.dev"]
    before = {name: live_crd(cluster, name) for name in crds}

    out = kubectl_apply(
        cluster, "--server-side", f"--field-manager={gitops_manager}", "-f", str(PLAIN)
    )

    for name in crds:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} serverside-applied" in out
        live = live_crd(cluster, name)
        # The same schema: the CRD's spec, and so its generation, unchanged.
        assert live["spec"] == before[name]["spec"]
        assert live["metadata"]["generation"] == before[name]["metadata"]["generation"]
        # The release's labels and keep annotation stay: crds/ carries none to take them away.
        assert live["metadata"].get("labels") == before[name]["metadata"].get("labels")
        assert live["metadata"].get("annotations") == before[name]["metadata"].get("annotations")
        managers = {(f["manager"], f["operation"]) for f in live["metadata"]["managedFields"]}
        assert (gitops_manager, "Apply") in managers
        conditions = {c["type"]: c["status"] for c in live["status"]["conditions"]}
        assert conditions["Established"] == "True"
