"""What the people who run LLMFleet look at, checked against the tests' real Prometheus: the
chart's dashboards (every panel query) and alert rules (loaded into Prometheus, firing without
the minutes of `for` they wait in production, expressions unchanged)."""

from __future__ import annotations

import time
from typing import Any

import yaml
from dashboards import promql
from dashboards.queries import all_queries
from localcluster.metricsstack import MetricsStack
from localcluster.supervisor import REPO

RULES = REPO / "charts" / "llmfleet" / "files" / "prometheus-rules.yaml"
ALERT_FOR = "0s"  # fire at the first evaluation that holds; the shipped rules wait 10-15 minutes
# Panels that show nothing while all is well (docs/observability.md says so), with the test that
# provokes their fault and checks they show it.
FAULT_ONLY = {
    "Reconcile errors by reason": "test_observability.py: a ResourceQuota refuses the HPA",
    # Engines serve it only with LoRA on; test_lora.py checks the series on the real vLLM.
    "LoRA adapters with requests": "test_lora.py: engines with --enable-lora",
}


def shortened_rules(text: str, wait: str = ALERT_FOR) -> str:
    """The rule file with every alert's `for` set to `wait`; nothing else changes."""
    doc = yaml.safe_load(text)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = wait
    return str(yaml.safe_dump(doc, sort_keys=False))


def load_alert_rules(stack: MetricsStack) -> None:
    stack.load_rules("llmfleet", shortened_rules(RULES.read_text()))


def alert_exprs() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def fired_since(stack: MetricsStack, namespace: str, llmdeployment: str, since: float) -> set[str]:
    """Alerts that fired for one LLMDeployment at any rule evaluation since `since`, from the
    ALERTS series Prometheus writes at each evaluation: an alert that held for one evaluation
    counts even if no poll of ours caught it (the test process polls seconds apart when busy)."""
    window = max(1, int(time.time() - since) + 1)
    selector = (
        f'ALERTS{{alertstate="firing",namespace="{namespace}",llmdeployment="{llmdeployment}"}}'
    )
    return {s["metric"]["alertname"] for s in stack.query(f"max_over_time({selector}[{window}s])")}


def panels_without_data(
    stack: MetricsStack, namespace: str, llmdeployment: str, within: float = 30
) -> list[str]:
    """empty_panels, asked again every 2 s for up to `within` seconds until none is empty: a
    series the operator or an engine has just set reaches Prometheus at its next scrape."""
    deadline = time.monotonic() + within
    while (empty := empty_panels(stack, namespace, llmdeployment)) and time.monotonic() < deadline:
        time.sleep(2)
    return empty


def empty_panels(stack: MetricsStack, namespace: str, llmdeployment: str) -> list[str]:
    """Dashboard queries (both dashboards, variables set to this LLMDeployment) that return no
    series now, but for the FAULT_ONLY panels; a query Prometheus refuses raises."""
    variables = {"namespace": namespace, "llmdeployment": llmdeployment}
    empty = []
    for q in all_queries():
        series = stack.query(promql.substitute(q.expr, variables))
        if not series and q.panel not in FAULT_ONLY:
            empty.append(f"{q.dashboard} / {q.panel} / {q.ref_id}: {q.expr}")
    return empty


def panel_exprs(title: str, namespace: str, llmdeployment: str) -> list[str]:
    """The queries of the dashboard panel titled `title`, variables set to one LLMDeployment."""
    queries = [q for q in all_queries() if q.panel == title]
    assert queries, f"no dashboard panel titled {title!r}"
    variables = {"namespace": namespace, "llmdeployment": llmdeployment}
    return [promql.substitute(q.expr, variables) for q in queries]


def panel(stack: MetricsStack, title: str, namespace: str, name: str) -> list[dict[str, Any]]:
    """The series of a dashboard panel's queries, as Grafana would show them now."""
    out: list[dict[str, Any]] = []
    for expr in panel_exprs(title, namespace, name):
        out.extend(stack.query(expr))
    return out


def panel_peak(stack: MetricsStack, title: str, namespace: str, name: str, since: float) -> float:
    """The highest value a dashboard panel drew since `since`, as Grafana would draw it at a
    resolution that skips no scrape (a step of half the scrape interval)."""
    values = [
        float(v)
        for expr in panel_exprs(title, namespace, name)
        for series in stack.query_range(expr, since, time.time(), step=1.0)
        for _, v in series["values"]
    ]
    assert values, f"panel {title!r} drew nothing"
    return max(values)
