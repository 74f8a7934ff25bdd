"""The figure tables are generated from bench/results.json: every figure in bench/README.md, the
headline figures in README.md. The committed tables are what the writer makes of the committed
results, and `python -m bench.run --table-only` rewrites both without running a benchmark."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """bench.results and bench.run (the repository root on the path, as `make bench` has it)."""
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("bench.results"), importlib.import_module("bench.run")


def between_markers(results: ModuleType, path: Path) -> str:
    text = path.read_text()
    begin, end = re.escape(results.TABLE_BEGIN), re.escape(results.TABLE_END)
    found = re.findall(f"{begin}\n(.*?)\n{end}", text, re.S)
    assert len(found) == 1, f"{path}: one {results.TABLE_BEGIN} ... {results.TABLE_END}"
    return str(found[0])


def test_the_committed_tables_are_generated_from_the_committed_results(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    results, _ = bench
    data = results.load()
    assert between_markers(results, results.BENCH_README) == results.table(data), (
        "bench/README.md's table is stale: make bench-tables"
    )
    assert between_markers(results, results.FRONT_README) == results.headlines(data), (
        "README.md's headline figures are stale: make bench-tables"
    )


def test_bench_readme_lists_every_recorded_figure_and_readme_five(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    results, _ = bench
    data = results.load()
    full = between_markers(results, results.BENCH_README)
    assert [n for n in results.FIGURES if n in data and f"| `{n}` |" not in full] == []
    assert len(results.HEADLINES) == 5
    placeholders = [n for _, t in results.HEADLINES for n in re.findall(r"\{(\w+)\}", t)]
    assert set(placeholders) <= set(results.FIGURES), "a headline names a figure FIGURES lacks"
    assert set(placeholders) <= set(data), "a headline names a figure results.json lacks"
    front = between_markers(results, results.FRONT_README)
    assert len([r for r in front.splitlines() if r.startswith("| ")]) == 2 + 5
    assert "{" not in front, "a placeholder left unfilled"


def test_table_only_writes_both_tables_and_runs_no_benchmark(
    bench: tuple[ModuleType, ModuleType],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results, run = bench
    marked = f"before\n{results.TABLE_BEGIN}\nSTALE\n{results.TABLE_END}\nafter\n"
    for attr in ("BENCH_README", "FRONT_README"):
        copy = tmp_path / attr
        copy.write_text(marked)
        monkeypatch.setattr(results, attr, copy)
    data: dict[str, object] = dict.fromkeys(
        (n for _, t in results.HEADLINES for n in re.findall(r"\{(\w+)\}", t)), 1.0
    )
    data |= {"reconcile_p50_ms": 12.5, "operator_failover_s": 11.0, "machine": {"cpus": 2}}
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results.json")
    results.RESULTS.write_text(json.dumps(data))
    benchmarks = {f"bench.{name}" for name in run.BENCHMARKS}
    loaded = benchmarks & set(sys.modules)

    assert run.main(["--table-only"]) == 0
    assert benchmarks & set(sys.modules) == loaded, "--table-only imported a benchmark"
    full = (tmp_path / "BENCH_README").read_text()
    assert full.startswith("before\n")
    assert full.endswith("after\n")
    assert "| `reconcile_p50_ms` | Apply → children created" in full
    assert "| 12.5 ms |" in full
    assert "STALE" not in full
    front = (tmp_path / "FRONT_README").read_text()
    assert "11 s median of 5" in front
    assert "reconcile_p50_ms" not in front
    assert "STALE" not in front
    assert json.loads(results.RESULTS.read_text()) == data, "--table-only wrote results.json"


def test_table_only_takes_no_benchmark_names(bench: tuple[ModuleType, ModuleType]) -> None:
    _, run = bench
    with pytest.raises(SystemExit) as exited:
        run.main(["--table-only", "router"])
    assert exited.value.code == 2


def test_a_file_without_markers_is_refused(
    bench: tuple[ModuleType, ModuleType], tmp_path: Path
) -> None:
    results, _ = bench
    doc = tmp_path / "README.md"
    doc.write_text("no markers here\n")
    with pytest.raises(ValueError, match="no <!-- bench:begin -->"):
        results.write_between_markers(doc, "table")
    assert doc.read_text() == "no markers here\n"


def test_the_tables_are_written_where_the_docs_say(bench: tuple[ModuleType, ModuleType]) -> None:
    results, _ = bench
    assert results.BENCH_README == REPO / "bench" / "README.md"
    assert results.FRONT_README == REPO / "README.md"
    target = re.search(r"^bench-tables:.*\n\t(.*)$", (REPO / "Makefile").read_text(), re.M)
    assert target, "no make bench-tables"
    assert target[1].endswith("-m bench.run --table-only")
