"""The llmfleet source files a component runs (its root modules and every llmfleet module they
import, directly or through others) and their hash: what a component's release module pins, so
that a changed component comes with a new version of its image (test_fetcher_release.py,
test_routerhop_release.py)."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "operator" / "src"


def module_file(name: str) -> Path | None:
    path = SRC.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported_llmfleet_modules(path: Path) -> set[str]:
    names: set[str] = set()
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module is None and node.level == 1:
            names.update(f"{package}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names.add(f"{package}.{node.module}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "llmfleet":
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[0] == "llmfleet")
    return names


def component_sources(
    roots: Iterable[str], packages: Iterable[str], ignored: set[Path]
) -> list[Path]:
    """Every llmfleet source file `roots` import, and every module of `packages` (a package's
    modules run whether or not its __init__ imports them), less `ignored`."""
    found: set[Path] = set()
    todo = list(roots)
    whole = set(packages)
    while todo:
        path = module_file(todo.pop())
        if path is None or path in found:
            continue
        found.add(path)
        todo += imported_llmfleet_modules(path)
        package = ".".join(path.relative_to(SRC).parts[:-1])
        if path.name == "__init__.py" and package in whole:
            todo += [f"{package}.{p.stem}" for p in path.parent.glob("*.py")]
    return sorted(found - ignored)


def sources_sha256(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(SRC)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
