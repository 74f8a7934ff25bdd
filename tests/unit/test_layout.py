"""The tree keeps what ships, what helps develop and what verifies apart: imports run
tests -> dev -> operator, never back, and the README's layout names every top-level folder."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Top-level import names of each part (dev/ and tests/ are put on the path as folders).
DEV_PACKAGES = {p.name for p in (REPO / "dev").iterdir() if (p / "__init__.py").exists()}
TEST_PACKAGES = {"e2e", "unit", "conftest", "tests"}


def imported(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one Python file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("operator/src", DEV_PACKAGES | TEST_PACKAGES),
        ("dev", TEST_PACKAGES),
        ("bench", TEST_PACKAGES),
    ],
)
def test_imports_never_run_back(part: str, forbidden: set[str]) -> None:
    assert {"localcluster", "dashboards"} <= DEV_PACKAGES
    offenders = {
        str(f.relative_to(REPO)): sorted(imported(f) & forbidden)
        for f in (REPO / part).rglob("*.py")
        if imported(f) & forbidden
    }
    assert not offenders


def test_the_readme_layout_names_every_top_level_folder() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1]
    folders = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}
    missing = sorted(f for f in folders if f"`{f}/" not in layout)
    assert not missing, f"README's Layout does not name: {missing}"
    assert not (REPO / "tests" / "localcluster").exists()
