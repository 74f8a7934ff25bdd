"""The tree keeps what ships, what helps develop and what verifies apart: imports run
tests -> dev -> operator, never back, and the README's layout names every top-level folder.
Inside the operator the planner stays a lower layer than what reads its Plans, in modules of
one job each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "operator" / "src"
# Top-level import names of each part (dev/ and tests/ are put on the path as folders).
DEV_PACKAGES = {p.name for p in (REPO / "dev").iterdir() if (p / "__init__.py").exists()}
TEST_PACKAGES = {"e2e", "unit", "conftest", "tests"}
# (folder under operator/src, package it never imports): the planner turns a spec into a Plan
# and knows nothing of what renders, applies or prints it.
LOWER_LAYERS = [
    ("llmfleet/planner", "llmfleet.render"),
    ("llmfleet/planner", "llmfleet.reconcile"),
    ("llmfleet/planner", "llmfleet.commands"),
]
# (folder under operator/src, most lines a module in it may have): past that it holds more
# than one job, as planning.py did before it was split.
MAX_LINES = [("llmfleet/planner", 300)]
SIZED = [(m, limit) for folder, limit in MAX_LINES for m in sorted((SRC / folder).glob("*.py"))]


def imported(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one Python file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def imported_modules(path: Path) -> set[str]:
    """Dotted names of what one file under operator/src imports, relative imports resolved;
    `from a import b` counts as `a` and `a.b`, since b may be a module."""
    package = path.relative_to(SRC).parent.parts
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join((*base, *([node.module] if node.module else [])))
            names |= {module, *(f"{module}.{a.name}" for a in node.names)}
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


@pytest.mark.parametrize(("folder", "forbidden"), LOWER_LAYERS, ids=lambda v: v)
def test_lower_layers_never_import_higher_ones(folder: str, forbidden: str) -> None:
    modules = sorted((SRC / folder).rglob("*.py"))
    assert modules
    offenders = {
        str(m.relative_to(SRC)): sorted(
            n for n in imported_modules(m) if n == forbidden or n.startswith(f"{forbidden}.")
        )
        for m in modules
    }
    assert not {m: names for m, names in offenders.items() if names}


@pytest.mark.parametrize(
    ("module", "limit"), SIZED, ids=[str(m.relative_to(SRC)) for m, _ in SIZED]
)
def test_modules_stay_within_their_folders_line_limit(module: Path, limit: int) -> None:
    lines = len(module.read_text().splitlines())
    assert lines <= limit, f"{module.name} has {lines} lines; split it by job"
