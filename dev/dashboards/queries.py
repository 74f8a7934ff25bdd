"""The PromQL expressions of the generated dashboards, one PanelQuery each, and the variable
values to fill in (promql.substitute) before promtool or a live Prometheus runs them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .build import build
from .generate import DASHBOARDS

# The variable values a test substitutes when it has nothing better (see promql.substitute).
EXAMPLE_VARIABLES = {"datasource": "prometheus", "namespace": "default", "llmdeployment": "demo"}


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL expression of a generated dashboard."""

    dashboard: str  # uid
    panel: str  # title
    ref_id: str
    expr: str  # with Grafana variables; see promql.substitute
    instant: bool


def panel_queries(board: dict[str, Any]) -> Iterator[PanelQuery]:
    """Every target expression of a dashboard JSON model (rows and nested panels included)."""
    panels: list[dict[str, Any]] = list(board.get("panels") or [])
    while panels:
        panel = panels.pop(0)
        panels.extend(panel.get("panels") or [])
        for target in panel.get("targets") or []:
            yield PanelQuery(
                dashboard=str(board.get("uid")),
                panel=str(panel.get("title")),
                ref_id=str(target.get("refId")),
                expr=str(target.get("expr") or ""),
                instant=bool(target.get("instant")),
            )


def all_queries() -> list[PanelQuery]:
    """Every (dashboard, panel, expr) of the generated dashboards, for tests that run them."""
    return [pq for spec in DASHBOARDS for pq in panel_queries(build(spec))]
