"""The chart ships the repository's CRDs unchanged (`make chart-crds` copies them)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "crds"
SHIPPED = REPO / "charts" / "llmfleet" / "crds"
FIX = "run `make chart-crds` (never edit charts/llmfleet/crds/ by hand)"


def yaml_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.yaml"))}


def test_chart_ships_crds() -> None:
    assert yaml_files(SOURCE), f"no CRDs in {SOURCE}: run `make crds`"
    assert yaml_files(SHIPPED), f"no CRDs in {SHIPPED}: {FIX}"


def test_chart_crds_equal_the_generated_crds_byte_for_byte() -> None:
    source, shipped = yaml_files(SOURCE), yaml_files(SHIPPED)
    assert sorted(shipped) == sorted(source), f"different CRD files: {FIX}"
    stale = [name for name in source if shipped[name] != source[name]]
    assert stale == [], f"stale CRDs in the chart: {FIX}"


def test_the_chart_annotation_names_every_crd_it_ships() -> None:
    chart = yaml.safe_load((SHIPPED.parent / "Chart.yaml").read_text())
    listed = chart["annotations"]["llmfleet.dev/crds"].split(",")
    shipped = [yaml.safe_load(text)["metadata"]["name"] for text in yaml_files(SHIPPED).values()]
    assert sorted(listed) == sorted(shipped)
