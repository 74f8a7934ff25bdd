"""The main panels of the "LLMFleet / LLMDeployment" dashboard as one PNG, drawn from the very
queries the shipped dashboard runs (dev/dashboards/generate.py, Grafana variables
substituted), over a range of the tests' real Prometheus. Grafana itself cannot be installed
here; this is what its panels would show."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dashboards import promql
from dashboards.build import build
from dashboards.generate import DASHBOARDS
from localcluster.metricsstack import MetricsStack

MAIN_PANELS = (
    "Waiting requests per pod vs HPA target",
    "Running requests (batch size)",
    "Replicas: desired, current, ready",
    "KV cache usage",
    "Time to first token",
    "Prompt and generation tokens/s",
)
# What Grafana's $__rate_interval comes to for a range of a few minutes at a 2 s scrape interval.
BUILTINS = {"__rate_interval": "30s"}


def _legend(series: dict[str, Any], legend_format: str, fallback: str) -> str:
    labels = series.get("metric") or {}
    if legend_format and legend_format != "__auto":
        text = legend_format
        for key, value in labels.items():
            text = text.replace("{{" + key + "}}", str(value)).replace("{{ " + key + " }}", value)
        return text
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or fallback


def render(
    stack: MetricsStack,
    *,
    namespace: str,
    llmdeployment: str,
    start: float,
    end: float,
    path: Path,
    title: str,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    board = next(build(spec) for spec in DASHBOARDS if spec.title == "LLMFleet / LLMDeployment")
    panels = {p.get("title"): p for p in _all_panels(board)}
    variables = {"namespace": namespace, "llmdeployment": llmdeployment}
    cols = 2
    rows = math.ceil(len(MAIN_PANELS) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.2 * rows), dpi=100, squeeze=False)
    step = max(1.0, (end - start) / 300)
    for ax, name in zip(axes.flat, MAIN_PANELS, strict=False):
        panel = panels[name]
        for target in panel.get("targets") or []:
            expr = promql.substitute(str(target["expr"]), variables, BUILTINS)
            for series in stack.query_range(expr, start, end, step=step):
                xs = [float(t) - start for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                label = _legend(series, str(target.get("legendFormat") or ""), target["refId"])
                ax.plot(xs, ys, label=label, linewidth=1.2)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("seconds", fontsize=8)
        ax.tick_params(labelsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper right")
    for ax in list(axes.flat)[len(MAIN_PANELS) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _all_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    todo = list(board.get("panels") or [])
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(p.get("panels") or [])
    return out
