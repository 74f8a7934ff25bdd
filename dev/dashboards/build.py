"""A dashboard's JSON model from its spec, through Grafana's foundation SDK, and the committed
form of it (`render`)."""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from .model import DashboardSpec, Panel, Query

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["llmfleet", "vllm"]


def _target(query: Query, ref_id: str) -> prometheus.Dataquery:
    target = (
        prometheus.Dataquery()
        .expr(query.expr)
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .legend_format(query.legend or "__auto")
    )
    if query.table:
        target = target.format(PromQueryFormat.TABLE)
    return target.instant() if query.instant else target.range()


def _panel(spec: Panel, panel_id: int) -> cogbuilder.Builder[model.Panel]:
    builder: timeseries.Panel | stat.Panel | table.Panel
    if spec.kind == "timeseries":
        ts = timeseries.Panel().fill_opacity(10).line_width(1)
        ts = ts.legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        if spec.stacked:
            ts = ts.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL))
        builder = ts
    elif spec.kind == "stat":
        builder = stat.Panel()
    else:
        builder = table.Panel()
    builder = (
        builder.id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.width)
        .height(spec.height)
    )
    if spec.min is not None:
        builder = builder.min(spec.min)
    if spec.max is not None:
        builder = builder.max(spec.max)
    if spec.no_value:
        builder = builder.no_value(spec.no_value)
    steps = [model.Threshold(value=None, color="green")]
    steps += [model.Threshold(value=v, color=c) for v, c in spec.thresholds]
    builder = builder.thresholds(
        dash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)
    )
    for i, query in enumerate(spec.queries):
        builder = builder.with_target(_target(query, chr(ord("A") + i)))
    return builder


def _variables(spec: DashboardSpec) -> list[cogbuilder.Builder[model.VariableModel]]:
    out: list[cogbuilder.Builder[model.VariableModel]] = [
        dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
    ]
    if spec.per_llmdeployment:
        # The operator publishes every LLMDeployment it reconciles, valid or not, with its
        # namespace and name (llmfleet_condition): the dashboard lists even those whose engines
        # never started (Pending for GPUs) or that are not scraped yet.
        out.append(
            dash.QueryVariable("namespace")
            .label("Namespace")
            .datasource(DATASOURCE)
            .query("label_values(llmfleet_condition, namespace)")
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
        )
        out.append(
            dash.QueryVariable("llmdeployment")
            .label("LLMDeployment")
            .datasource(DATASOURCE)
            .query('label_values(llmfleet_condition{namespace="$namespace"}, llmdeployment)')
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
        )
    return out


def build(spec: DashboardSpec) -> dict[str, Any]:
    """The dashboard's JSON model, as a dict."""
    board = (
        dash.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(TAGS)
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-3h", "now")
        .refresh("30s")
        .timezone("browser")
        .variables(_variables(spec))
        .link(
            dash.DashboardLink("LLMFleet")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags(["llmfleet"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    panel_id = 1
    for row in spec.rows:
        board = board.with_row(dash.Row(row.title).id(panel_id))
        panel_id += 1
        for panel in row.panels:
            board = board.with_panel(_panel(panel, panel_id))
            panel_id += 1
    encoded: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


def render(spec: DashboardSpec) -> str:
    """The committed form: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(build(spec), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
