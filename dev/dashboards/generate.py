"""The Grafana dashboards of the chart (charts/llmfleet/dashboards/*.json), as code.

    PYTHONPATH=dev python -m dashboards --output-dir charts/llmfleet/dashboards

writes llmdeployment.json ("LLMFleet / LLMDeployment", uid llmfleet-llmdeployment) and
operator.json ("LLMFleet / Operator", uid llmfleet-operator): sorted keys, 2-space indent, a
trailing newline, no timestamps, so the output only changes when the code does.

The rows are in llmdeployment_rows.py, operator_rows.py and batch.py, the translation into
Grafana's JSON model in build.py; `queries.all_queries()` lists every (dashboard, panel title,
PromQL) of the generated JSON, so tests can run each expression against promtool or a live
Prometheus.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .build import render
from .llmdeployment_rows import LLMDEPLOYMENT_ROWS
from .model import DashboardSpec
from .operator_rows import OPERATOR_ROWS

LLMDEPLOYMENT_UID = "llmfleet-llmdeployment"
OPERATOR_UID = "llmfleet-operator"

DASHBOARDS = (
    DashboardSpec(
        uid=LLMDEPLOYMENT_UID,
        title="LLMFleet / LLMDeployment",
        description="One LLMDeployment: queue and autoscaling, engine load, latency, layout.",
        filename="llmdeployment.json",
        rows=LLMDEPLOYMENT_ROWS,
        per_llmdeployment=True,
    ),
    DashboardSpec(
        uid=OPERATOR_UID,
        title="LLMFleet / Operator",
        description=(
            "The LLMFleet operator: reconciles, errors, conditions, planner decisions, batch on "
            "spare GPUs."
        ),
        filename="operator.json",
        rows=OPERATOR_ROWS,
        per_llmdeployment=False,
    ),
)


def write_all(output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in DASHBOARDS:
        path = output_dir / spec.filename
        path.write_text(render(spec), encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dashboards",
        description="Write the LLMFleet Grafana dashboards as JSON.",
    )
    parser.add_argument("--output-dir", type=Path, required=True, help="directory to write to")
    args = parser.parse_args(argv)
    for path in write_all(args.output_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
