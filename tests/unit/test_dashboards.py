"""The Grafana dashboards: committed JSON is what the code generates, every panel queries
something, every expression parses (promtool), and none uses a metric vLLM deprecated."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import generate as d
from dashboards import promql
from dashboards.batch import BATCH_ROW
from dashboards.build import build, render
from dashboards.queries import EXAMPLE_VARIABLES, PanelQuery, all_queries

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "charts" / "llmfleet" / "dashboards"
SPECS = {spec.uid: spec for spec in d.DASHBOARDS}
QUERIES = all_queries()


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed; run `make debian-deps`")
    return path


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels") or [])
    return [p for p in out if p.get("type") != "row"]


@pytest.mark.parametrize("uid", sorted(SPECS))
def test_committed_json_is_generated(uid: str) -> None:
    spec = SPECS[uid]
    path = COMMITTED / spec.filename
    assert path.is_file(), f"{path} is missing: run `make dashboards`"
    assert path.read_text(encoding="utf-8") == render(spec), (
        f"{path} differs from dev/dashboards/generate.py: run `make dashboards`"
    )


def test_no_stray_dashboard_files() -> None:
    expected = {spec.filename for spec in d.DASHBOARDS}
    assert {p.name for p in COMMITTED.glob("*.json")} == expected


def test_generation_is_deterministic(tmp_path: Path) -> None:
    assert d.main(["--output-dir", str(tmp_path)]) == 0
    for spec in d.DASHBOARDS:
        text = (tmp_path / spec.filename).read_text(encoding="utf-8")
        assert text == render(spec)
        assert text.endswith("}\n")
        assert json.loads(text)["uid"] == spec.uid


@pytest.mark.parametrize(
    ("uid", "title"),
    [
        ("llmfleet-llmdeployment", "LLMFleet / LLMDeployment"),
        ("llmfleet-operator", "LLMFleet / Operator"),
    ],
)
def test_uid_and_title(uid: str, title: str) -> None:
    board = build(SPECS[uid])
    assert (board["uid"], board["title"]) == (uid, title)


@pytest.mark.parametrize(
    ("uid", "variables"),
    [
        ("llmfleet-llmdeployment", ["datasource", "namespace", "llmdeployment"]),
        ("llmfleet-operator", ["datasource"]),
    ],
)
def test_variables(uid: str, variables: list[str]) -> None:
    board = build(SPECS[uid])
    found = {v["name"]: v for v in board["templating"]["list"]}
    assert list(found) == variables
    assert found["datasource"]["type"] == "datasource"
    assert found["datasource"]["query"] == "prometheus"
    if "llmdeployment" in found:
        assert found["namespace"]["query"] == "label_values(llmfleet_condition, namespace)"
        assert "$namespace" in found["llmdeployment"]["query"]
        for name in ("namespace", "llmdeployment"):
            assert found[name]["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("uid", sorted(SPECS))
def test_every_panel_has_a_query_and_the_datasource_variable(uid: str) -> None:
    board = build(SPECS[uid])
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(board):
        exprs = [t.get("expr", "").strip() for t in panel.get("targets") or []]
        assert any(exprs), f"panel {panel['title']!r} has no query"
        assert all(exprs), f"panel {panel['title']!r} has an empty query"
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel.get("description"), f"panel {panel['title']!r} has no description"


def test_the_llmdeployment_dashboard_follows_the_selected_llmdeployment() -> None:
    for pq in QUERIES:
        if pq.dashboard == d.LLMDEPLOYMENT_UID:
            assert '"$namespace"' in pq.expr, pq
            assert "$llmdeployment" in pq.expr, pq


@pytest.mark.parametrize(
    "needle",
    [
        # Every signal the issue asks the LLMDeployment dashboard for.
        "vllm:num_requests_waiting",
        "kube_horizontalpodautoscaler_spec_target_metric",
        "vllm:num_requests_running",
        "vllm:iteration_tokens_total_bucket",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "kube_horizontalpodautoscaler_status_desired_replicas",
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_deployment_status_replicas_ready",
        "kube_pod_status_unschedulable",
        "llmfleet_plan_replicas",
        "llmfleet_engine_startup_seconds_bucket",
        # And the operator dashboard: its own work by kind, and its queues (issue 45).
        "sum by (kind, result) (rate(llmfleet_reconcile_total",
        "sum by (le, kind) (rate(llmfleet_reconcile_duration_seconds_bucket",
        "sum by (kind, reason) (rate(llmfleet_reconcile_errors_total",
        "llmfleet_api_writes_total",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_retries_total",
        "workqueue_adds_total",
        "workqueue_longest_running_processor_seconds",
        "llmfleet_condition",
        "llmfleet_planner_decisions_total",
        "llmfleet_predicted_output_tokens_per_second",
        # And its row for batch on spare GPUs (issue 33).
        'llmfleet_batch_gpu_seconds_total{priority="Spare"}',
        'llmfleet_batch_preemptions_total{priority="Spare"}',
        'llmfleet_batch_lines_redone_total{priority="Spare"}',
    ],
)
def test_signal_is_charted(needle: str) -> None:
    assert any(needle in pq.expr for pq in QUERIES), needle


@pytest.mark.parametrize("deprecated", promql.DEPRECATED_METRICS)
def test_no_deprecated_vllm_metric(deprecated: str) -> None:
    for pq in QUERIES:
        assert deprecated not in pq.expr, pq
    for spec in d.DASHBOARDS:
        assert deprecated not in (COMMITTED / spec.filename).read_text(encoding="utf-8")


def test_latency_panels_show_p50_p95_p99() -> None:
    for title in ("Time to first token", "Inter-token latency", "End-to-end request latency"):
        exprs = [pq.expr for pq in QUERIES if pq.panel == title]
        assert [e.split(",")[0] for e in exprs] == [
            "histogram_quantile(0.5",
            "histogram_quantile(0.95",
            "histogram_quantile(0.99",
        ], title


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (
            'x{namespace="$namespace", llmdeployment="$llmdeployment"}[$__rate_interval]',
            'x{namespace="ml", llmdeployment="chat"}[1m]',
        ),
        ("${namespace}/[[llmdeployment]]/${namespace:raw}", "ml/chat/ml"),
        ("increase(x[$__range])", "increase(x[1h])"),
        ('label_replace(x, "a", "$1", "b", "(.+)")', 'label_replace(x, "a", "$1", "b", "(.+)")'),
    ],
)
def test_substitute(expr: str, expected: str) -> None:
    assert promql.substitute(expr, {"namespace": "ml", "llmdeployment": "chat"}) == expected


def test_substitute_refuses_an_unknown_variable() -> None:
    with pytest.raises(KeyError, match=r"\$cluster"):
        promql.substitute('x{cluster="$cluster"}', {})


@pytest.mark.parametrize("pq", QUERIES, ids=lambda pq: f"{pq.dashboard}:{pq.panel}:{pq.ref_id}")
def test_expression_parses(pq: PanelQuery, tmp_path: Path) -> None:
    """promtool parses the expression, variables substituted, as a recording rule (one run per
    query, so a failure names its dashboard and panel)."""
    expr = promql.substitute(pq.expr, EXAMPLE_VARIABLES)
    path = tmp_path / "rule.yaml"
    rule = {"record": "llmfleet_dashboard_check", "expr": expr}
    path.write_text(yaml.safe_dump({"groups": [{"name": "one", "rules": [rule]}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{pq.panel}: {expr}\n{result.stdout}{result.stderr}"


def test_throughput_ratio_counts_only_engines_with_a_queue(tmp_path: Path) -> None:
    """The Operator dashboard's measured/predicted panel on series Prometheus evaluates: pod a
    had requests waiting and made 100 tokens/s, pod b (idle, 10 tokens/s) is left out, the plan
    predicts 200 per pod: 0.5 for the LLMDeployment, nothing for one without a prediction."""
    (expr,) = [pq.expr for pq in QUERIES if pq.panel == "Throughput: measured / predicted"]
    engine = 'namespace="ns", llmdeployment="{d}", pod="{p}", model_name="m", engine="0"'

    def series(metric: str, d: str, p: str, values: str) -> dict[str, str]:
        return {"series": f"{metric}{{{engine.format(d=d, p=p)}}}", "values": values}

    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    series("vllm:generation_tokens_total", "chat", "a", "0+1500x40"),
                    series("vllm:generation_tokens_total", "chat", "b", "0+150x40"),
                    series("vllm:num_requests_waiting", "chat", "a", "3x40"),
                    series("vllm:num_requests_waiting", "chat", "b", "0x40"),
                    series("vllm:generation_tokens_total", "other", "c", "0+1500x40"),
                    series("vllm:num_requests_waiting", "other", "c", "3x40"),
                    {
                        "series": 'llmfleet_predicted_output_tokens_per_second{namespace="ns", '
                        'llmdeployment="chat", job="llmfleet", instance="op:9090"}',
                        "values": "200x40",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": "llmfleet_dashboard_check",
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                "labels": 'llmfleet_dashboard_check{namespace="ns", '
                                'llmdeployment="chat"}',
                                "value": 0.5,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    rule = {"record": "llmfleet_dashboard_check", "expr": promql.substitute(expr, {})}
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "one", "rules": [rule]}]})
    )
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", "test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_spare_batch_row_shows_zero_rather_than_nothing_without_batch_jobs() -> None:
    """The operator has no llmfleet_batch_* series until a job's first status write: every
    query of the row falls back to 0 (tests/e2e/observe.py wants every panel to have data)."""
    exprs = [pq.expr for pq in QUERIES if pq.panel in {p.title for p in BATCH_ROW.panels}]
    assert len(exprs) == 6
    assert all("or vector(0)" in e for e in exprs), exprs
