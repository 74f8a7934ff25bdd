"""What a dashboard is made of, as the generator reads it: rows of panels, each with its PromQL
queries. A module of its own so that the rows of each dashboard (llmdeployment_rows.py,
operator_rows.py, batch.py) and what builds them (build.py) need not import one another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PanelKind = Literal["timeseries", "stat", "table"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    kind: PanelKind = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    # (value, color) steps above the base (green) step.
    thresholds: tuple[tuple[float, str], ...] = ()
    stacked: bool = False
    no_value: str = ""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    filename: str
    rows: tuple[Row, ...]
    per_llmdeployment: bool
