"""Upgrading the operator keeps engines serving: for every example LLMDeployment, the engine pod
templates this tree renders (a Deployment's, a LeaderWorkerSet's leader and worker templates) are
the ones the previous release rendered, unless CHANGELOG.md's line for the current release names
that example: `Engine pods: restarted (<why>) in <example>.yaml, ...` (docs/operator.md,
"Upgrades"). A changed template rolls every engine pod of such an LLMDeployment on upgrade:
minutes of reloading weights, and GPUs for the surge pods. Each example is held to the line on
its own, and the line may name only examples whose templates did change. An example the previous
release refused runs under no release yet: it is compared from the release after the first that
accepted it (when PREVIOUS_RELEASE moves there), and meanwhile held to rendering the same
templates under any operator version.

The previous release renders in a subprocess from its own source (`git archive` of the pinned
commit), with the script below written against its API. LLMBatchJobs are not compared: the
operator creates a batch Job once and never applies it again (reconcile/llmbatchjob/batchjob.py), so
an upgrade cannot restart its pods.
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
from changelog import ENGINE_LINE, changelog_releases
from examplepods import EXAMPLES, engine_pod_templates

import llmfleet
from llmfleet import __version__
from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE, DEFAULT_ROUTER_HOP_IMAGE
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.fetcher import FETCHER_CONTAINER
from llmfleet.render.names import VERSION_LABEL
from llmfleet.render.routerhop import HOP_CONTAINER
from llmfleet.settings import OperatorSettings

FLEET = OperatorSettings().fleet
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


def current(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    owner = Owner(doc["metadata"]["name"], NAMESPACE, UID)
    return engine_pod_templates(render_fleet(owner, spec, plan(spec), FLEET).objects())


def previous_source(tmp: Path) -> Path:
    """The previous release's operator/src, or a skip where this clone lacks the commit."""
    try:
        known = subprocess.run(
            [
                "git",
                "-C",
                str(REPO),
                "cat-file",
                "-e",
                f"{PREVIOUS_RELEASE}^{{commit}}",
            ],
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
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            "--format=tar",
            PREVIOUS_RELEASE,
            "operator/src",
        ],
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


def announced_restarts() -> set[str]:
    """The examples the current release's `Engine pods:` line says it restarts."""
    section = dict(changelog_releases()).get(__version__)
    assert section is not None, f"CHANGELOG.md has no section ## [{__version__}] - <date>"
    lines = list(ENGINE_LINE.finditer(section))
    assert len(lines) == 1, f"CHANGELOG.md [{__version__}] needs one 'Engine pods: ...' line"
    examples = lines[0]["examples"]
    return set(examples.split(", ")) if examples else set()


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    def lines(template: dict[str, Any] | None) -> list[str]:
        if template is None:
            return []
        return json.dumps(template, indent=1, sort_keys=True).splitlines(keepends=True)

    return "".join(
        difflib.unified_diff(lines(before), lines(after), "previous release", "this tree")
    )


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_upgrading_restarts_only_the_engines_the_changelog_names(
    example: str, previous: dict[str, dict[str, Any]]
) -> None:
    rendered = previous[example]
    announced = example in announced_restarts()
    if "refused" in rendered:
        # New in this release: nothing runs it, so there is nothing to restart or announce.
        LLMDeploymentSpec.model_validate(EXAMPLES[example]["spec"])
        assert not announced, (
            f"CHANGELOG.md [{__version__}] announces a restart of {example}, which the previous "
            f"release refused ({rendered['refused'][:200]}): no engine of it runs yet"
        )
        return
    before = engine_pod_templates(rendered["objects"])
    after = current(EXAMPLES[example])
    changed = {
        where: diff(before.get(where), after.get(where))
        for where in sorted(before.keys() | after.keys())
        if before.get(where) != after.get(where)
    }
    assert announced or not changed, (
        f"upgrading from {PREVIOUS_RELEASE[:7]} restarts the engine pods of {example}: "
        + "".join(f"\n{where} changed:\n{text}" for where, text in changed.items())
        + f"\nKeep the templates as they were, or name {example} in CHANGELOG.md "
        f"[{__version__}]'s 'Engine pods: restarted (<why>) in <example>, ...' line."
    )
    assert changed or not announced, (
        f"CHANGELOG.md [{__version__}] announces a restart of {example}, and its engine pod "
        "templates are those of the previous release: take it off the 'Engine pods:' line"
    )


def test_the_changelog_names_only_examples_that_exist() -> None:
    assert announced_restarts() <= set(EXAMPLES), announced_restarts() - set(EXAMPLES)


# This tree's render under the operator version argv[1], as a release that changed nothing else
# would render: {"source": ..., "examples": {example: [objects]}} on stdout.
RENDER_AS_VERSION = """
import json, sys
import llmfleet
llmfleet.__version__ = sys.argv[1]
from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

out = {"source": llmfleet.__file__, "examples": {}}
for name, doc in json.load(sys.stdin).items():
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    owner = Owner(doc["metadata"]["name"], sys.argv[2], sys.argv[3])
    fleet = render_fleet(owner, spec, plan(spec), OperatorSettings().fleet)
    out["examples"][name] = fleet.objects()
json.dump(out, sys.stdout)
"""
SOURCE = Path(llmfleet.__file__).resolve().parents[1]
Rendered = dict[str, list[dict[str, Any]]]


def render_as_version(version: str, tmp: Path) -> Rendered:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LLMFLEET_"))}
    result = subprocess.run(
        [sys.executable, "-c", RENDER_AS_VERSION, version, NAMESPACE, UID],
        input=json.dumps(EXAMPLES),
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp,
        env={**env, "PYTHONPATH": str(SOURCE)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert Path(out["source"]).is_relative_to(SOURCE), out["source"]
    examples: Rendered = out["examples"]
    return examples


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Rendered, Rendered]:
    tmp = tmp_path_factory.mktemp("versions")
    return render_as_version(__version__, tmp), render_as_version("99.0.0", tmp)


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_a_release_that_changes_only_the_version_restarts_no_engine(
    example: str, two_versions: tuple[Rendered, Rendered]
) -> None:
    this, next_release = (rendered[example] for rendered in two_versions)
    # The version did reach what the operator applies (the objects' own labels)...
    labels = {obj["metadata"]["labels"].get(VERSION_LABEL) for obj in next_release}
    assert "99.0.0" in labels, labels
    # ...and no engine pod template: byte for byte, the adapter fetcher's image included.
    before, after = engine_pod_templates(this), engine_pod_templates(next_release)
    assert before
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True), "".join(
        diff(before.get(where), after.get(where)) for where in before.keys() | after.keys()
    )


def router_pod_templates(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        o["metadata"]["name"]: o["spec"]["template"]
        for o in objects
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "router"
    }


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_a_release_that_changes_only_the_version_restarts_no_router(
    example: str, two_versions: tuple[Rendered, Rendered]
) -> None:
    """Router pods too, the router hop's image of an LLMDeployment with adapters included: it
    is tagged with the hop's version, not the operator's."""
    this, next_release = (router_pod_templates(rendered[example]) for rendered in two_versions)
    assert json.dumps(next_release, sort_keys=True) == json.dumps(this, sort_keys=True)


def test_the_lora_example_runs_the_router_hop_under_its_own_version() -> None:
    """So that the test above holds the hop's image, whatever the operator's release."""
    doc = EXAMPLES["llama-3.1-8b-lora.yaml"]
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    objects = render_fleet(Owner(doc["metadata"]["name"], NAMESPACE, UID), spec, plan(spec), FLEET)
    (template,) = router_pod_templates(objects.objects()).values()
    images = {c["name"]: c["image"] for c in template["spec"]["containers"]}
    assert images[HOP_CONTAINER] == DEFAULT_ROUTER_HOP_IMAGE
    assert __version__ not in DEFAULT_ROUTER_HOP_IMAGE


def test_the_lora_example_runs_the_adapter_fetcher_under_its_own_version() -> None:
    """So that the test above holds the fetcher's image, whatever the operator's release."""
    (template,) = current(EXAMPLES["llama-3.1-8b-lora.yaml"]).values()
    images = {c["name"]: c["image"] for c in template["spec"]["containers"]}
    assert images[FETCHER_CONTAINER] == DEFAULT_FETCHER_IMAGE
    assert __version__ not in DEFAULT_FETCHER_IMAGE


def test_the_examples_cover_both_engine_kinds() -> None:
    kinds = {where.split("/")[0] for doc in EXAMPLES.values() for where in current(doc)}
    assert kinds == {"Deployment", "LeaderWorkerSet"}
