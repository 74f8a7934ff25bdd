"""The router hop's image carries its own version (llmfleet.routerhop.release), which the router
pod template of every LLMDeployment with adapters names: it must change when the hop's code does,
and only then, and the chart, the operator and `make images` must name the same image."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from sourcehash import REPO, SRC, component_sources, sources_sha256

from llmfleet.models.defaults import DEFAULT_ROUTER_HOP_IMAGE
from llmfleet.routerhop.release import HOP_SOURCES_SHA256, HOP_VERSION

BUILD_IMAGES = REPO / "dev" / "images" / "build.sh"
# `python -m llmfleet.routerhop`: the package, every module of it.
HOP_ROOTS = ("llmfleet.routerhop", "llmfleet.routerhop.__main__")
# llmfleet/__init__.py names the operator's release, which moves every release without changing
# what the hop does; release.py holds the hash itself.
NOT_HOP_SOURCE = {SRC / "llmfleet" / "__init__.py", SRC / "llmfleet/routerhop/release.py"}


def hop_sources() -> list[Path]:
    return component_sources(HOP_ROOTS, ["llmfleet.routerhop"], NOT_HOP_SOURCE)


def chart_hop_version() -> str:
    chart = yaml.safe_load((REPO / "charts/llmfleet/Chart.yaml").read_text())
    version: str = chart["annotations"]["llmfleet.dev/router-hop-version"]
    return version


def test_a_changed_hop_comes_with_a_new_hop_version() -> None:
    sources = hop_sources()
    now = sources_sha256(sources)
    assert now == HOP_SOURCES_SHA256, (
        "the router hop's source changed ("
        + ", ".join(str(p.relative_to(SRC)) for p in sources)
        + f"): set HOP_VERSION above {HOP_VERSION!r} in llmfleet/routerhop/release.py and "
        f"Chart.yaml's llmfleet.dev/router-hop-version, HOP_SOURCES_SHA256 = {now!r}, and say in "
        "CHANGELOG.md that the router pods of LLMDeployments with adapters restart. Without a "
        "new version the new hop would run under the old tag."
    )


def test_the_hop_hash_reads_the_hop_and_not_the_operator() -> None:
    sources = {str(p.relative_to(SRC)) for p in hop_sources()}
    assert {"llmfleet/routerhop/hop.py", "llmfleet/routerhop/__main__.py"} <= sources
    assert "llmfleet/routerhop/podwatch.py" in sources  # reached through a relative import
    assert not {"llmfleet/__init__.py", "llmfleet/routerhop/release.py"} & sources
    assert not any(s.startswith(("llmfleet/render/", "llmfleet/reconcile/")) for s in sources)


def test_operator_chart_and_image_build_name_one_hop_image() -> None:
    built = subprocess.run(
        [str(BUILD_IMAGES), "--print-tag", "router-hop"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert chart_hop_version() == HOP_VERSION
    assert DEFAULT_ROUTER_HOP_IMAGE == built == f"docker.io/llmfleet/router-hop:{HOP_VERSION}"
