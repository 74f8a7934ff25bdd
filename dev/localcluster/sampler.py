"""Samples a Prometheus text endpoint at a fixed rate in a process of its own, appending one JSON
line per sample: {"t": epoch seconds, "m": {"name{labels}": value}} for the series whose names
start with one of the given prefixes. A process rather than a thread: the test process is busy
deserialising API objects and would space the samples seconds apart on a loaded machine.

    python -m localcluster.sampler URL OUT INTERVAL PREFIX...

Start it with processes.ahead_of_workloads: a measuring instrument must run ahead of the
processes it measures when the machine is saturated (samples came 3-4 s apart during a
scale-down otherwise).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from localcluster.promtext import scrape


def main(argv: list[str]) -> int:
    url, out, interval, prefixes = argv[0], Path(argv[1]), float(argv[2]), tuple(argv[3:])
    with out.open("a") as f:
        while True:
            began = time.time()
            metrics = scrape(url, timeout=2)
            if metrics:
                kept = {k: v for k, v in metrics.items() if k.startswith(prefixes)}
                f.write(json.dumps({"t": began, "m": kept}) + "\n")
                f.flush()
            time.sleep(max(0.0, interval - (time.time() - began)))


def read(path: Path) -> list[tuple[float, dict[str, Any]]]:
    samples = []
    for line in path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # the line being written
        samples.append((float(doc["t"]), dict(doc["m"])))
    return samples


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
