"""The adapter fetcher's image carries its own version (llmfleet.fetcher.release), which every
single-node LoRA engine pod template names: it must change when the fetcher's code does, and only
then, and the chart, the operator and `make images` must name the same image."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import yaml
from localcluster.noderunner import images
from sourcehash import SRC, component_sources, sources_sha256

from llmfleet.fetcher.release import FETCHER_SOURCES_SHA256, FETCHER_VERSION
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE

REPO = Path(__file__).resolve().parents[2]
BUILD_IMAGES = REPO / "dev" / "images" / "build.sh"
# `llmfleet fetch-adapters`: the console script's dispatcher, the command and the fetcher package.
FETCHER_ROOTS = ("llmfleet.cli", "llmfleet.commands.fetch_adapters", "llmfleet.fetcher")
# llmfleet/__init__.py names the operator's release (the CLI's --version), which moves every
# release without changing what the fetcher does; release.py holds the hash itself.
NOT_FETCHER_SOURCE = {SRC / "llmfleet" / "__init__.py", SRC / "llmfleet/fetcher/release.py"}


def fetcher_sources() -> list[Path]:
    """Every llmfleet source file the fetcher's modules import, directly or through others."""
    return component_sources(FETCHER_ROOTS, ["llmfleet.fetcher"], NOT_FETCHER_SOURCE)


def chart_fetcher_version() -> str:
    chart = yaml.safe_load((REPO / "charts/llmfleet/Chart.yaml").read_text())
    version: str = chart["annotations"]["llmfleet.dev/adapter-fetcher-version"]
    return version


def test_a_changed_fetcher_comes_with_a_new_fetcher_version() -> None:
    sources = fetcher_sources()
    now = sources_sha256(sources)
    assert now == FETCHER_SOURCES_SHA256, (
        "the adapter fetcher's source changed ("
        + ", ".join(str(p.relative_to(SRC)) for p in sources)
        + f"): set FETCHER_VERSION above {FETCHER_VERSION!r} in llmfleet/fetcher/release.py and "
        f"Chart.yaml's llmfleet.dev/adapter-fetcher-version, FETCHER_SOURCES_SHA256 = {now!r}, "
        "and announce the restart of the LoRA examples in CHANGELOG.md (docs/operator.md, "
        "'Upgrades'). Without a new version the new fetcher would run under the old tag."
    )


def test_the_fetcher_hash_reads_the_fetcher_and_not_the_operator() -> None:
    sources = {str(p.relative_to(SRC)) for p in fetcher_sources()}
    assert {"llmfleet/fetcher/server.py", "llmfleet/commands/fetch_adapters.py"} <= sources
    assert not {"llmfleet/__init__.py", "llmfleet/commands/run.py"} & sources
    assert not any(s.startswith(("llmfleet/render/", "llmfleet/reconcile/")) for s in sources)


def test_operator_chart_and_image_build_name_one_fetcher_image() -> None:
    built = subprocess.run(
        [str(BUILD_IMAGES), "--print-tag", "adapter-fetcher"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert chart_fetcher_version() == FETCHER_VERSION
    assert DEFAULT_FETCHER_IMAGE == built == f"docker.io/llmfleet/adapter-fetcher:{FETCHER_VERSION}"


def test_the_lab_runs_the_fetcher_from_the_archive_make_images_writes(tmp_path: Path) -> None:
    archive = subprocess.run(
        [str(BUILD_IMAGES), "--print-path", "adapter-fetcher"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ref = {images.REF_ANNOTATION: f"docker.io/llmfleet/adapter-fetcher:{chart_fetcher_version()}"}
    (tmp_path / "index.json").write_text(
        json.dumps({"manifests": [{"digest": "sha256:abc", "annotations": ref}]})
    )
    with tarfile.open(tmp_path / Path(archive).name, "w") as tar:
        tar.add(tmp_path / "index.json", arcname="index.json")
    assert images.find_image(DEFAULT_FETCHER_IMAGE, tmp_path) is not None
