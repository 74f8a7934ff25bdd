"""The query prometheus-adapter sends Prometheus for the HPA's queue metric, filled in as the
adapter fills its rule's template for a request on pods (prometheus-adapter v0.12.0,
pkg/naming/metrics_query.go: the namespace and pod matchers, grouped by the pod label), so a test
can run it against a Prometheus (the lab's, or promtool's) at a time of its choosing."""

from __future__ import annotations

from typing import Any

import yaml

from .cmdlines import ADAPTER_RULES

QUEUE_SERIES = "vllm:num_requests_waiting"


def queue_rule() -> dict[str, Any]:
    (rule,) = [
        r
        for r in yaml.safe_load(ADAPTER_RULES.read_text())["rules"]
        if r["seriesQuery"].startswith(f"{QUEUE_SERIES}{{")
    ]
    return dict(rule)


def queue_metric_query(namespace: str, pods: list[str] | tuple[str, ...]) -> str:
    """The rule's metricsQuery for these pods of `namespace`."""
    query: str = (
        queue_rule()["metricsQuery"]
        .replace("<<.Series>>", QUEUE_SERIES)
        .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod=~"{"|".join(pods)}"')
        .replace("<<.GroupBy>>", "pod")
    )
    if "<<" in query:
        raise ValueError(f"the adapter rule uses a template field this helper lacks: {query}")
    return query
