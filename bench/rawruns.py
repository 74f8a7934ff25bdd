"""What the benchmarks that keep their raw runs (one JSON object a line) share: their command
line (results.raw_runs_main) and their `run()` for `make bench`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import results

Runs = results.Runs


@dataclass(frozen=True)
class RawRuns:
    """A benchmark (`prog`, its module docstring `doc`) whose runs `measure` takes (`repeat`: its
    option, its default, what it counts), keeps in `raw`, plots and summarizes into figures."""

    prog: str
    doc: str
    raw: Path
    repeat: tuple[str, int, str]
    measure: Callable[[int], Runs]
    plot: Callable[[Runs], None]
    summarize: Callable[[Runs], dict[str, float]]

    def run(self, repeat: int | None = None) -> dict[str, float]:
        """`make bench`'s entry: measure `repeat` times (default: the option's), plot and
        summarize."""
        measured = self.measure(self.repeat[1] if repeat is None else repeat)
        self.plot(measured)
        return self.summarize(measured)

    def main(self) -> int:
        """Its command line (results.raw_runs_main)."""
        return results.raw_runs_main(
            self.prog,
            self.doc,
            self.raw,
            repeat=self.repeat,
            measure=self.measure,
            plot=self.plot,
            summarize=self.summarize,
        )
