"""The tree keeps what ships, what helps develop and what verifies apart: imports run
tests -> dev -> operator, never back (and within tests, e2e -> api, never back: the API tier
runs without the lab; and no product tier imports from the lab's own tests, tests/lab), and
the README's layout names every top-level folder. Inside the operator the planner stays a
lower layer than what reads its Plans, in modules of one job each, and below it the catalog
(what the planner knows of models and GPUs) above the API types; reconcile/ keeps its rooms by
trade (the two kinds apart, the machinery below both), and no module imports itself back
through others."""

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
# and knows nothing of what renders, applies or prints it. Below it, the catalog (models, GPUs,
# the Hub's config.json) builds on the API types and is used by the planner, never the reverse;
# the API types are the bottom: they define the CRDs and know no catalog.
HIGHER_THAN_PLANNER = ("llmfleet.render", "llmfleet.reconcile", "llmfleet.commands")
LOWER_LAYERS = [
    *(("llmfleet/planner", higher) for higher in HIGHER_THAN_PLANNER),
    *(("llmfleet/catalog", higher) for higher in (*HIGHER_THAN_PLANNER, "llmfleet.planner")),
    *(
        ("llmfleet/models", higher)
        for higher in (*HIGHER_THAN_PLANNER, "llmfleet.planner", "llmfleet.catalog")
    ),
]
# (folder under operator/src, most lines a module in it may have): past that it holds more
# than one job, as planning.py and reconcile/status.py did before they were split.
FOLDER_LINE_LIMITS = [
    ("llmfleet/planner", 300),
    ("llmfleet/reconcile", 400),
    ("llmfleet/catalog", 400),
    ("llmfleet/models", 400),
]
SIZED = [
    (m, limit) for folder, limit in FOLDER_LINE_LIMITS for m in sorted((SRC / folder).rglob("*.py"))
]
# reconcile/'s rooms by trade (folder under operator/src, package it never imports): each kind's
# reconcile knows nothing of the other's, and the machinery they share knows neither, nor the
# manager that wires them together.
RECONCILE = "llmfleet/reconcile"
ROOM_WALLS = [
    (f"{RECONCILE}/llmdeployment", "llmfleet.reconcile.llmbatchjob"),
    (f"{RECONCILE}/llmbatchjob", "llmfleet.reconcile.llmdeployment"),
    (f"{RECONCILE}/machinery", "llmfleet.reconcile.llmdeployment"),
    (f"{RECONCILE}/machinery", "llmfleet.reconcile.llmbatchjob"),
    (f"{RECONCILE}/machinery", "llmfleet.reconcile.manager"),
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


def importers_of(folder: str, forbidden: str) -> dict[str, list[str]]:
    """The modules under `folder` that import `forbidden` or anything in it, with what."""
    modules = sorted((SRC / folder).rglob("*.py"))
    assert modules, f"{folder} holds no module"
    offenders = {
        str(m.relative_to(SRC)): sorted(
            n for n in imported_modules(m) if n == forbidden or n.startswith(f"{forbidden}.")
        )
        for m in modules
    }
    return {m: names for m, names in offenders.items() if names}


@pytest.mark.parametrize(("folder", "forbidden"), LOWER_LAYERS, ids=lambda v: v)
def test_lower_layers_never_import_higher_ones(folder: str, forbidden: str) -> None:
    assert not importers_of(folder, forbidden)


@pytest.mark.parametrize(("folder", "forbidden"), ROOM_WALLS, ids=lambda v: v)
def test_reconciles_rooms_keep_to_their_trade(folder: str, forbidden: str) -> None:
    assert not importers_of(folder, forbidden)


def test_a_newcomer_finds_each_kinds_reconcile_by_its_name() -> None:
    """reconcile/'s docstring names its rooms, and each room's says what it holds."""
    rooms = sorted(p.parent.name for p in (SRC / RECONCILE).glob("*/__init__.py"))
    assert rooms == ["llmbatchjob", "llmdeployment", "machinery"]
    index = ast.get_docstring(ast.parse((SRC / RECONCILE / "__init__.py").read_text())) or ""
    assert all(f"`{room}/`" in index for room in rooms), index
    for room, reconcile in [
        ("llmdeployment", "controller"),
        ("llmbatchjob", "batchjob"),
    ]:
        said = ast.get_docstring(ast.parse((SRC / RECONCILE / room / "__init__.py").read_text()))
        assert f"`{reconcile}" in (said or ""), f"{room}/__init__.py does not name {reconcile}"
        assert (SRC / RECONCILE / room / f"{reconcile}.py").is_file()


# --- no import cycle in the operator -------------------------------------------------------------


def operator_modules() -> dict[str, Path]:
    """Every module under operator/src by dotted name (a package by its own name)."""
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def operator_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """The import graph of the operator's modules, wherever an import stands (in a function, under
    TYPE_CHECKING: a cycle for the type checker is one all the same); `from a import b` is an
    edge to the module a.b when there is one, else to a."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level else ""
                module = ".".join(p for p in (base, node.module) if p)
                found |= {
                    f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                    for a in node.names
                }
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other round (Tarjan's strongly connected
    components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


CYCLES = {
    "a-chain": ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    "two-modules-round": ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    "three-round-beside-a-chain": (
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}},
        [["a", "b", "c"]],
    ),
}


@pytest.mark.parametrize(("graph", "expected"), CYCLES.values(), ids=CYCLES.keys())
def test_cycles_are_found_where_modules_import_each_other_round(
    graph: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert cycles(graph) == expected


def test_no_operator_module_imports_itself_back_through_others() -> None:
    modules = operator_modules()
    graph = operator_imports(modules)
    assert (
        "llmfleet.reconcile.llmdeployment.reasons"
        in graph["llmfleet.reconcile.llmdeployment.status"]
    )
    assert not cycles(graph)


@pytest.mark.parametrize(
    ("module", "limit"), SIZED, ids=[str(m.relative_to(SRC)) for m, _ in SIZED]
)
def test_modules_stay_within_their_folders_line_limit(module: Path, limit: int) -> None:
    lines = len(module.read_text().splitlines())
    assert lines <= limit, f"{module.name} has {lines} lines; split it by job"
