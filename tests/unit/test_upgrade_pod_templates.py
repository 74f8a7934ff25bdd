"""Upgrading the operator keeps engines serving: for every example LLMDeployment, the engine pod
templates this tree renders (a Deployment's, a LeaderWorkerSet's leader and worker templates) are
the ones the previous release rendered, unless CHANGELOG.md says, for the current release,
`Engine pods: restarted (<why>)`. A changed template rolls every engine pod of every
LLMDeployment on upgrade: minutes of reloading weights, and GPUs for the surge pods.

The previous release renders in a subprocess from its own source (`git archive` of the pinned
commit), with the script below written against its API. LLMBatchJobs are not compared: the
operator creates a batch Job once and never applies it again (reconcile/batchjob.py), so an
upgrade cannot restart its pods.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_release import ENGINE_LINE, changelog_releases

from llmfleet import __version__
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet

REPO = Path(__file__).resolve().parents[2]
# The previous release, 0.1.0 (CHANGELOG.md). Move it to the release before this one at each
# release, and check the script below against that commit's API.
PREVIOUS_RELEASE = "acc2f64857186829d876030bd5646060cc297563"
NAMESPACE = "team-a"
UID = "0a1b2c3d-uid"

# Runs on the previous release's source: its render API, not this tree's. Reads {example:
# manifest} on stdin, writes {example: {"objects": [...]}} or {"refused": why} (a spec that
# release refused cannot be running under it).
PREVIOUS_RENDER = """
import json, sys
import llmfleet
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet

out = {"source": llmfleet.__file__, "examples": {}}
for name, doc in json.load(sys.stdin).items():
    try:
        spec = LLMDeploymentSpec.model_validate(doc["spec"])
    except ValueError as error:
        out["examples"][name] = {"refused": str(error)}
        continue
    owner = Owner(doc["metadata"]["name"], sys.argv[1], sys.argv[2])
    out["examples"][name] = {"objects": render_fleet(owner, spec, plan(spec))}
json.dump(out, sys.stdout)
"""


def llmdeployment_examples() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "LLMDeployment":
                found[path.name] = doc
    return found


EXAMPLES = llmdeployment_examples()


def engine_pod_templates(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every engine pod template, keyed by the object holding it and its path there."""
    templates = {}
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "LeaderWorkerSet":
            group = obj["spec"]["leaderWorkerTemplate"]
            templates[f"{where} .spec.leaderWorkerTemplate.leaderTemplate"] = group[
                "leaderTemplate"
            ]
            templates[f"{where} .spec.leaderWorkerTemplate.workerTemplate"] = group[
                "workerTemplate"
            ]
        elif (
            obj["kind"] == "Deployment"
            and obj["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"
        ):
            templates[f"{where} .spec.template"] = obj["spec"]["template"]
    return templates


def current(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    owner = Owner(doc["metadata"]["name"], NAMESPACE, UID)
    return engine_pod_templates(render_fleet(owner, spec, plan(spec)))


def previous_source(tmp: Path) -> Path:
    """The previous release's operator/src, or a skip where this clone lacks the commit."""
    try:
        known = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"],
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        pytest.skip("git is not installed: the previous release cannot be extracted")
    if known.returncode != 0:
        pytest.skip(
            f"git history lacks the previous release {PREVIOUS_RELEASE} (a shallow clone?): "
            "fetch it (git fetch --unshallow) to compare engine pod templates across upgrades"
        )
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_RELEASE, "operator/src"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, filter="data")
    return tmp / "operator" / "src"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("previous-release")
    source = previous_source(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    result = subprocess.run(
        [sys.executable, "-c", PREVIOUS_RENDER, NAMESPACE, UID],
        input=json.dumps(EXAMPLES),
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
        env={**env, "PYTHONPATH": str(source)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # Not this tree's llmfleet (an editable install, or the PYTHONPATH the tests run with).
    assert Path(out["source"]).is_relative_to(source), out["source"]
    examples: dict[str, dict[str, Any]] = out["examples"]
    return examples


def restarts_announced() -> bool:
    section = dict(changelog_releases()).get(__version__)
    assert section is not None, f"CHANGELOG.md has no section ## [{__version__}] - <date>"
    lines = ENGINE_LINE.findall(section)
    assert len(lines) == 1, f"CHANGELOG.md [{__version__}] needs one 'Engine pods: ...' line"
    return lines[0] != "not restarted"


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    def lines(template: dict[str, Any] | None) -> list[str]:
        if template is None:
            return []
        return json.dumps(template, indent=1, sort_keys=True).splitlines(keepends=True)

    return "".join(
        difflib.unified_diff(lines(before), lines(after), "previous release", "this tree")
    )


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_upgrading_leaves_engine_pod_templates_unchanged(
    example: str, previous: dict[str, dict[str, Any]]
) -> None:
    rendered = previous[example]
    if "refused" in rendered:
        pytest.skip(f"the previous release refused {example}, so none runs under it")
    before = engine_pod_templates(rendered["objects"])
    after = current(EXAMPLES[example])
    changed = {
        where: diff(before.get(where), after.get(where))
        for where in sorted(before.keys() | after.keys())
        if before.get(where) != after.get(where)
    }
    if changed and restarts_announced():
        return
    assert not changed, (
        f"upgrading from {PREVIOUS_RELEASE[:7]} restarts the engine pods of {example}: "
        + "".join(f"\n{where} changed:\n{text}" for where, text in changed.items())
        + f"\nKeep the templates as they were, or say why in CHANGELOG.md [{__version__}] with "
        "'Engine pods: restarted (<why>)'."
    )


def test_the_examples_cover_both_engine_kinds() -> None:
    kinds = {where.split("/")[0] for doc in EXAMPLES.values() for where in current(doc)}
    assert kinds == {"Deployment", "LeaderWorkerSet"}
