"""The tree keeps what ships, what helps develop and what verifies apart: imports run
tests -> dev -> operator, never back (and within tests, e2e -> api, never back: the API tier
runs without the lab; and no product tier imports from the lab's own tests, tests/lab), and
the README's layout names every top-level folder. Inside the operator the planner stays a
lower layer than what reads its Plans, in modules of one job each."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "operator" / "src"
# Top-level import names of each part (dev/ and tests/ are put on the path as folders).
DEV_PACKAGES = {p.name for p in (REPO / "dev").iterdir() if (p / "__init__.py").exists()}
TESTS = REPO / "tests"
# Top-level import names of the tests (tests/ is on the path as a folder too): its packages (the
# tiers) and modules (the conftest and what the tiers share); unit/ and lab/ have no __init__.py.
TEST_PACKAGES = {
    p.stem for p in TESTS.iterdir() if (p / "__init__.py").exists() or p.suffix == ".py"
} | {"unit", "lab", "tests"}
# (folder under operator/src, package it never imports): the planner turns a spec into a Plan
# and knows nothing of what renders, applies or prints it.
LOWER_LAYERS = [
    ("llmfleet/planner", "llmfleet.render"),
    ("llmfleet/planner", "llmfleet.reconcile"),
    ("llmfleet/planner", "llmfleet.commands"),
]
# (folder under operator/src, most lines a module in it may have): past that it holds more
# than one job, as planning.py and reconcile/status.py did before they were split.
FOLDER_LINE_LIMITS = [("llmfleet/planner", 300), ("llmfleet/reconcile", 400)]
SIZED = [
    (m, limit) for folder, limit in FOLDER_LINE_LIMITS for m in sorted((SRC / folder).glob("*.py"))
]
# What ships, at the top of the repository: the operator, its chart, the plain CRDs for those who
# apply them without Helm (`make crds` writes them and the chart's), the images and examples.
SHIPPED_FOLDERS = {"operator", "charts", "crds", "images", "examples"}


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
        ("tests/api", {"e2e", "lab"}),
        ("tests/unit", {"lab"}),
        ("tests/e2e", {"lab"}),
    ],
)
def test_imports_never_run_back(part: str, forbidden: set[str]) -> None:
    assert {"localcluster", "dashboards"} <= DEV_PACKAGES
    assert {"api", "e2e", "conftest", "clusters", "manifests"} <= TEST_PACKAGES
    offenders = {
        str(f.relative_to(REPO)): sorted(imported(f) & forbidden)
        for f in (REPO / part).rglob("*.py")
        if imported(f) & forbidden
    }
    assert not offenders


# --- tests: what test modules share lives in helper modules ---------------------------------

TEST_MODULES = sorted(TESTS.rglob("test_*.py"))


def imported_test_modules(path: Path) -> set[str]:
    """The test_* modules one file imports, however it spells the import (`import test_x`,
    `from test_x import y`, `from .test_x import y`, `from tests.unit.test_x import y`,
    `from . import test_x`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            dotted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            dotted = [module, *(f"{module}.{a.name}" for a in node.names)]
        else:
            continue
        for parts in (d.split(".") for d in dotted):
            # Only the tests' own modules: aiohttp.test_utils is no test module of ours.
            if (
                getattr(node, "level", 0)
                or parts[0] in TEST_PACKAGES
                or parts[0].startswith("test_")
            ):
                names |= {part for part in parts if part.startswith("test_")}
    return names


def imports_between_test_modules() -> set[tuple[str, str]]:
    """(importer, imported module) for each import of a test module by another under tests/."""
    return {
        (str(path.relative_to(TESTS)), name)
        for path in TEST_MODULES
        for name in imported_test_modules(path)
    }


def test_no_test_module_imports_another() -> None:
    """A helper two test modules share lives in a helper module named for what it holds (not
    test_*): a test module imported by another runs its module-level code twice and ties the
    importer to tests it never meant to depend on."""
    assert len(TEST_MODULES) > 100
    offenders = sorted(
        f"{importer} imports {name}" for importer, name in imports_between_test_modules()
    )
    assert not offenders, "move what they share into a helper module: " + "; ".join(offenders)


def test_the_readme_layout_names_every_top_level_folder() -> None:
    readme = (REPO / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1]
    folders = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert folders >= SHIPPED_FOLDERS, f"missing at the top level: {SHIPPED_FOLDERS - folders}"
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
