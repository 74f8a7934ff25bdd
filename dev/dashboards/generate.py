"""The Grafana dashboards of the chart (charts/llmfleet/dashboards/*.json), as code.

    PYTHONPATH=dev python -m dashboards --output-dir charts/llmfleet/dashboards

writes llmdeployment.json ("LLMFleet / LLMDeployment", uid llmfleet-llmdeployment) and
operator.json ("LLMFleet / Operator", uid llmfleet-operator): sorted keys, 2-space indent, a
trailing newline, no timestamps, so the output only changes when this file does.

`all_queries()` lists every (dashboard, panel title, PromQL) of the generated JSON, and
`promql.substitute` fills in the Grafana variables, so tests can run each expression against
promtool or a live Prometheus.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from . import promql as q
from .batch import BATCH_ROW
from .model import Panel, Query, Row

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["llmfleet", "vllm"]
LLMDEPLOYMENT_UID = "llmfleet-llmdeployment"
OPERATOR_UID = "llmfleet-operator"
QUANTILES = (0.5, 0.95, 0.99)
# The variable values a test substitutes when it has nothing better (see example_variables()).
EXAMPLE_VARIABLES = {"datasource": "prometheus", "namespace": "default", "llmdeployment": "demo"}


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    filename: str
    rows: tuple[Row, ...]
    per_llmdeployment: bool


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL expression of a generated dashboard."""

    dashboard: str  # uid
    panel: str  # title
    ref_id: str
    expr: str  # with Grafana variables; see promql.substitute
    instant: bool


def _quantiles(histogram: str) -> tuple[Query, ...]:
    return tuple(Query(q.quantile(x, histogram), f"p{round(x * 100)}") for x in QUANTILES)


# --- LLMFleet / LLMDeployment ----------------------------------------------------------------

_WAITING_PER_POD = f"sum by (pod) ({q.engine(q.VLLM_WAITING)})"
# vllm:lora_requests_info keeps every label set it ever had, each at the time it was last current
# (vLLM restamps the current one at every scheduler step): only recent stamps are in use now.
_LORA_RUNNING = q.engine(q.VLLM_LORA_INFO, 'running_lora_adapters!=""')
LORA_RECENT_SECONDS = 30
_HPA_TARGET = q.hpa(
    "kube_horizontalpodautoscaler_spec_target_metric",
    f'metric_name="{q.HPA_QUEUE_METRIC}", metric_target_type="average"',
)

LLMDEPLOYMENT_ROWS = (
    Row(
        "Load and autoscaling",
        (
            Panel(
                "Waiting requests per pod vs HPA target",
                "Requests queued in each engine pod (vllm:num_requests_waiting), their average "
                "over pods (what the HorizontalPodAutoscaler compares), and the HPA's target "
                "(spec.autoscaling.targetQueueDepth, from kube-state-metrics). The average "
                "staying above the target while replicas are at their maximum means the fleet "
                "needs more GPUs.",
                (
                    Query(_WAITING_PER_POD, "{{pod}}"),
                    Query(f"avg({_WAITING_PER_POD})", "average per pod"),
                    Query(f"max({_HPA_TARGET})", "HPA target"),
                ),
            ),
            Panel(
                "Running requests (batch size)",
                "Requests in each engine pod's running batch (vllm:num_requests_running): the "
                "live batch size, bounded by --max-num-seqs.",
                (Query(f"sum by (pod) ({q.engine(q.VLLM_RUNNING)})", "{{pod}}"),),
            ),
            Panel(
                "LoRA adapters with requests",
                "LoRA only (docs/lora.md): for each set of adapters with requests running in "
                "one engine's batch, how many engines run that set now, from "
                "vllm:lora_requests_info (its running_lora_adapters label; vLLM stamps the "
                "series with the time while requests run). vLLM 0.32 counts no requests per "
                "adapter; status.adapters says which engines hold which adapters.",
                (
                    Query(
                        f"count by (running_lora_adapters) ((time() - {_LORA_RUNNING}) "
                        f"< {LORA_RECENT_SECONDS})",
                        "{{running_lora_adapters}}",
                    ),
                ),
                no_value="no adapter in use",
            ),
            Panel(
                "Replicas: desired, current, ready",
                "The HorizontalPodAutoscaler's desired and current replicas and bounds, and the "
                "ready and specified replicas of the engine Deployments (<name>-tp<N> or "
                "<name>-cpu, every layout), from kube-state-metrics.",
                (
                    Query(
                        f"max({q.hpa('kube_horizontalpodautoscaler_status_desired_replicas')})",
                        "HPA desired",
                    ),
                    Query(
                        f"max({q.hpa('kube_horizontalpodautoscaler_status_current_replicas')})",
                        "HPA current",
                    ),
                    Query(
                        f"max({q.hpa('kube_horizontalpodautoscaler_spec_min_replicas')})",
                        "HPA min",
                    ),
                    Query(
                        f"max({q.hpa('kube_horizontalpodautoscaler_spec_max_replicas')})",
                        "HPA max",
                    ),
                    Query(
                        f"sum({q.engine_deployments('kube_deployment_spec_replicas')})",
                        "Deployment spec",
                    ),
                    Query(
                        f"sum({q.engine_deployments('kube_deployment_status_replicas_ready')})",
                        "Deployment ready",
                    ),
                ),
            ),
            Panel(
                "Engine pods Pending / unschedulable (waiting for GPUs)",
                "Engine pods in phase Pending, and those the scheduler cannot place "
                "(kube_pod_status_unschedulable: usually no node with enough free GPUs), from "
                "kube-state-metrics (needs --metric-labels-allowlist=pods=[llmfleet.dev/"
                "deployment]); and the operator's ScalingLimited condition (1 when True).",
                (
                    Query(
                        "sum(max by (namespace, pod) (kube_pod_status_phase"
                        f'{{namespace="{q.NAMESPACE_VAR}", phase="Pending"}})'
                        f" * on (namespace, pod) group_left () {q.engine_pods()}) or vector(0)",
                        "Pending",
                    ),
                    Query(
                        "sum(max by (namespace, pod) (kube_pod_status_unschedulable"
                        f'{{namespace="{q.NAMESPACE_VAR}"}})'
                        f" * on (namespace, pod) group_left () {q.engine_pods()}) or vector(0)",
                        "Unschedulable",
                    ),
                    Query(
                        "max("
                        + q.operator("llmfleet_condition", 'type="ScalingLimited", status="True"')
                        + ") or vector(0)",
                        "ScalingLimited condition",
                    ),
                ),
            ),
        ),
    ),
    Row(
        "Engine",
        (
            Panel(
                "Tokens per engine step",
                "Prompt plus generated tokens each engine step (forward pass) processed, from "
                "the vllm:iteration_tokens_total histogram: how full the batches are, bounded "
                "by --max-num-batched-tokens.",
                (
                    *_quantiles(f"{q.engine(q.VLLM_ITERATION_TOKENS + '_bucket')}"),
                    Query(
                        f"sum(rate({q.engine(q.VLLM_ITERATION_TOKENS + '_sum')}[{q.RATE}]))"
                        f" / sum(rate({q.engine(q.VLLM_ITERATION_TOKENS + '_count')}[{q.RATE}]))",
                        "mean",
                    ),
                ),
            ),
            Panel(
                "KV cache usage",
                "Fraction of each engine pod's KV cache blocks in use (vllm:kv_cache_usage_perc). "
                "Near 100% new requests wait and running ones are preempted.",
                (Query(f"max by (pod) ({q.engine(q.VLLM_KV_CACHE)})", "{{pod}}"),),
                unit="percentunit",
                min=0,
                max=1,
                thresholds=((0.9, "orange"), (0.95, "red")),
            ),
            Panel(
                "Preemptions",
                "Requests preempted per second in each engine pod (vllm:num_preemptions_total): "
                "the KV cache ran out and a running request was evicted, to be recomputed later.",
                (
                    Query(
                        f"sum by (pod) (rate({q.engine(q.VLLM_PREEMPTIONS)}[{q.RATE}]))",
                        "{{pod}}",
                    ),
                ),
                unit="reqps",
            ),
            Panel(
                "Prompt and generation tokens/s",
                "Tokens per second over all engine pods: prompt tokens prefilled "
                "(vllm:prompt_tokens_total) and tokens generated (vllm:generation_tokens_total).",
                (
                    Query(f"sum(rate({q.engine(q.VLLM_PROMPT_TOKENS)}[{q.RATE}]))", "prompt"),
                    Query(
                        f"sum(rate({q.engine(q.VLLM_GENERATION_TOKENS)}[{q.RATE}]))",
                        "generation",
                    ),
                ),
                unit="tokens/s",
            ),
            Panel(
                "Generated tokens/s per pod vs predicted",
                "Tokens each engine pod generates per second (vllm:generation_tokens_total) "
                "and what the plan predicts for one pod saturated at its planned concurrency "
                "with spec.workload (llmfleet_predicted_output_tokens_per_second, "
                "status.predicted). A pod with requests waiting and well below the line is "
                "slower than planned (longer prompts or outputs than spec.workload, or a slower "
                "GPU); no line when the GPU profile has no speed figures.",
                (
                    Query(
                        f"sum by (pod) (rate({q.engine(q.VLLM_GENERATION_TOKENS)}[{q.RATE}]))",
                        "{{pod}}",
                    ),
                    Query(
                        f"max({q.operator('llmfleet_predicted_output_tokens_per_second')})",
                        "predicted (saturated)",
                    ),
                ),
                unit="tokens/s",
            ),
            Panel(
                "Finished requests by reason",
                "Requests finished per second, by finish reason (vllm:request_success_total: "
                "stop, length, abort...). Many `length` means max_tokens or --max-model-len cut "
                "answers; `abort` means clients gave up.",
                (
                    Query(
                        "sum by (finished_reason) "
                        f"(rate({q.engine(q.VLLM_REQUEST_SUCCESS)}[{q.RATE}]))",
                        "{{finished_reason}}",
                    ),
                ),
                unit="reqps",
                stacked=True,
            ),
        ),
    ),
    Row(
        "Latency",
        (
            Panel(
                "Time to first token",
                "Time from a request's arrival to its first token "
                "(vllm:time_to_first_token_seconds): queueing plus prefill.",
                _quantiles(q.engine(q.VLLM_TTFT + "_bucket")),
                unit="s",
                width=8,
            ),
            Panel(
                "Inter-token latency",
                "Time between two output tokens of a request (vllm:inter_token_latency_seconds): "
                "the decode speed a user sees.",
                _quantiles(q.engine(q.VLLM_ITL + "_bucket")),
                unit="s",
                width=8,
            ),
            Panel(
                "End-to-end request latency",
                "Time from a request's arrival to its last token "
                "(vllm:e2e_request_latency_seconds).",
                _quantiles(q.engine(q.VLLM_E2E + "_bucket")),
                unit="s",
                width=8,
            ),
        ),
    ),
    Row(
        "Layout and startup",
        (
            Panel(
                "Chosen layout",
                "The layout the operator planned (llmfleet_plan_replicas): strategy, tensor "
                "parallel size and GPUs per pod; the value is the planned (minimum) pods.",
                (
                    Query(
                        "max by (strategy, tensor_parallel_size, gpus_per_replica) "
                        f"({q.operator('llmfleet_plan_replicas')})",
                        instant=True,
                        table=True,
                    ),
                ),
                kind="table",
                width=8,
            ),
            Panel(
                "Engine startup time (pod created to Ready)",
                "Seconds from an engine pod's creation to Ready (scheduling, image pull, model "
                "download and load, warm-up), over the dashboard's time range, as the operator "
                "observed it (llmfleet_engine_startup_seconds).",
                (
                    Query(
                        q.quantile(
                            0.5, q.operator("llmfleet_engine_startup_seconds_bucket"), "", q.RANGE
                        ),
                        "p50",
                        instant=True,
                    ),
                    Query(
                        q.quantile(
                            0.9, q.operator("llmfleet_engine_startup_seconds_bucket"), "", q.RANGE
                        ),
                        "p90",
                        instant=True,
                    ),
                    Query(
                        "sum(increase("
                        f"{q.operator('llmfleet_engine_startup_seconds_sum')}[{q.RANGE}]))"
                        " / sum(increase("
                        f"{q.operator('llmfleet_engine_startup_seconds_count')}[{q.RANGE}]))",
                        "mean",
                        instant=True,
                    ),
                ),
                kind="stat",
                unit="s",
                width=8,
            ),
            Panel(
                "Conditions",
                "The LLMDeployment's status conditions as the operator last computed them "
                "(llmfleet_condition).",
                (
                    Query(
                        f"max by (type, status, reason) ({q.operator('llmfleet_condition')})",
                        instant=True,
                        table=True,
                    ),
                ),
                kind="table",
                width=8,
            ),
        ),
    ),
)


# --- LLMFleet / Operator ---------------------------------------------------------------------

# Generated tokens/s of each engine pod that had requests waiting in the interval (so it ran a
# full batch, the state the prediction is for), over the plan's prediction for one such pod.
_BY_POD = "namespace, llmdeployment, pod"
_SATURATED_POD_TPS = (
    f"sum by ({_BY_POD}) (rate({q.VLLM_GENERATION_TOKENS}[{q.RATE}]))"
    f" and on ({_BY_POD}) (sum by ({_BY_POD}) (max_over_time({q.VLLM_WAITING}[{q.RATE}])) > 0)"
)
_MEASURED_OVER_PREDICTED = (
    f"avg by (namespace, llmdeployment) ({_SATURATED_POD_TPS})"
    " / on (namespace, llmdeployment)"
    " max by (namespace, llmdeployment) (llmfleet_predicted_output_tokens_per_second)"
)

OPERATOR_ROWS = (
    Row(
        "Reconciles",
        (
            Panel(
                "Reconciles/s by result",
                "Reconciles per second by result: changed (wrote something), unchanged, "
                "invalid (spec cannot be planned), error.",
                (
                    Query(
                        f"sum by (result) (rate(llmfleet_reconcile_total[{q.RATE}]))",
                        "{{result}}",
                    ),
                ),
                unit="ops",
                stacked=True,
            ),
            Panel(
                "Reconcile duration",
                "How long one reconcile takes (llmfleet_reconcile_duration_seconds).",
                tuple(
                    Query(q.quantile(x, "llmfleet_reconcile_duration_seconds_bucket"), f"p{p}")
                    for x, p in ((0.5, 50), (0.99, 99))
                ),
                unit="s",
            ),
            Panel(
                "Reconcile errors by reason",
                "Failed reconciles per second, by reason (Kubernetes API status such as "
                "Forbidden or Conflict, or the exception).",
                (
                    Query(
                        f"sum by (reason) (rate(llmfleet_reconcile_errors_total[{q.RATE}]))",
                        "{{reason}}",
                    ),
                ),
                unit="ops",
                stacked=True,
            ),
            Panel(
                "Kubernetes API writes/s",
                "Writes the operator made, by verb and kind (llmfleet_api_writes_total). "
                "A steady stream of updates means something keeps reverting the objects.",
                (
                    Query(
                        f"sum by (verb, kind) (rate(llmfleet_api_writes_total[{q.RATE}]))",
                        "{{verb}} {{kind}}",
                    ),
                ),
                unit="ops",
            ),
        ),
    ),
    Row(
        "LLMDeployments",
        (
            Panel(
                "LLMDeployments by condition",
                "How many LLMDeployments have each condition type in each status "
                "(llmfleet_condition).",
                (Query("count by (type, status) (llmfleet_condition)", "{{type}}={{status}}"),),
            ),
            Panel(
                "Planner decisions",
                "Layouts chosen over the time range, by objective, requested strategy, chosen "
                "strategy and layout (llmfleet_planner_decisions_total; strategy Failed when no "
                "layout fits).",
                (
                    Query(
                        "sum by (objective, requested_strategy, strategy, layout) "
                        f"(increase(llmfleet_planner_decisions_total[{q.RANGE}]))",
                        instant=True,
                        table=True,
                    ),
                ),
                kind="table",
            ),
            Panel(
                "Unhealthy LLMDeployments",
                "LLMDeployments that are not Planned, not Available, Degraded or "
                "ScalingLimited right now, with the reason.",
                (
                    Query(
                        "max by (namespace, llmdeployment, type, reason) ("
                        'llmfleet_condition{type=~"Planned|Available", status="False"}'
                        ' or llmfleet_condition{type=~"Degraded|ScalingLimited", status="True"})',
                        instant=True,
                        table=True,
                    ),
                ),
                kind="table",
                width=24,
            ),
        ),
    ),
    Row(
        "Plans against engines",
        (
            Panel(
                "Throughput: measured / predicted",
                "For each LLMDeployment, the generated tokens/s of its engine pods that had "
                "requests waiting (running a full batch, what the plan predicts for), averaged "
                "over those pods and divided by the plan's prediction for one pod "
                "(vllm:generation_tokens_total over llmfleet_predicted_output_tokens_per_second, "
                "status.predicted). Near 1: the plan holds. Well below 1 under sustained load: "
                "the requests are longer than spec.workload, or the engines are slower than the "
                "GPU profile says. Empty while no engine has a queue, and for GPUs without "
                "speed figures.",
                (Query(_MEASURED_OVER_PREDICTED, "{{namespace}}/{{llmdeployment}}"),),
                unit="percentunit",
                min=0,
                width=24,
            ),
        ),
    ),
    BATCH_ROW,
)

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


# --- building --------------------------------------------------------------------------------


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


def write_all(output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in DASHBOARDS:
        path = output_dir / spec.filename
        path.write_text(render(spec), encoding="utf-8")
        written.append(path)
    return written


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
