"""Metric names, selectors and Grafana variable substitution shared by the dashboards and the
tests that run their expressions (promtool, or a live Prometheus)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from llmfleet.render.autoscaling import QUEUE_METRIC
from llmfleet.render.names import ENGINE_NAME_SUFFIX_PATTERN

# vLLM (v1 engine) series, as scraped: counters carry the `_total` suffix, histograms
# `_bucket`/`_sum`/`_count`. Every series has `model_name` and `engine` labels; Prometheus adds
# `namespace`, `pod` and (relabelled from the pod label llmfleet.dev/deployment) `llmdeployment`.
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_KV_CACHE = "vllm:kv_cache_usage_perc"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
VLLM_E2E = "vllm:e2e_request_latency_seconds"
VLLM_ITERATION_TOKENS = "vllm:iteration_tokens_total"
# Served only by engines with --enable-lora (docs/lora.md).
VLLM_LORA_INFO = "vllm:lora_requests_info"

# Names vLLM deprecated (hidden or removed in the v1 engine); nothing of ours may use them.
DEPRECATED_METRICS = (
    "vllm:gpu_cache_usage_perc",
    "vllm:cpu_cache_usage_perc",
    "vllm:time_per_output_token_seconds",
    "vllm:num_requests_swapped",
    "vllm:gpu_prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits",
    "vllm:gpu_prefix_cache_hit_rate",
    "vllm:cpu_prefix_cache_hit_rate",
)

# The pods custom metric prometheus-adapter serves and the HPAs target.
HPA_QUEUE_METRIC = QUEUE_METRIC
# kube-state-metrics exposes the pod label llmfleet.dev/deployment with
# --metric-labels-allowlist=pods=[llmfleet.dev/deployment].
KSM_DEPLOYMENT_LABEL = "label_llmfleet_dev_deployment"

# Grafana variables of the LLMDeployment dashboard.
NAMESPACE_VAR = "$namespace"
LLMDEPLOYMENT_VAR = "$llmdeployment"
RATE = "$__rate_interval"
RANGE = "$__range"


def engine(metric: str, extra: str = "") -> str:
    """`metric` of the selected LLMDeployment's engine pods."""
    more = f", {extra}" if extra else ""
    return f'{metric}{{namespace="{NAMESPACE_VAR}", llmdeployment="{LLMDEPLOYMENT_VAR}"{more}}}'


def hpa(metric: str, extra: str = "") -> str:
    """kube-state-metrics HPA `metric` of the selected LLMDeployment (the HPA has its name)."""
    more = f", {extra}" if extra else ""
    return (
        f'{metric}{{namespace="{NAMESPACE_VAR}", '
        f'horizontalpodautoscaler="{LLMDEPLOYMENT_VAR}"{more}}}'
    )


def engine_deployments(metric: str) -> str:
    """kube-state-metrics Deployment `metric` of the selected LLMDeployment's engine
    Deployments (every layout, so a layout change shows both)."""
    return (
        f'{metric}{{namespace="{NAMESPACE_VAR}", '
        f'deployment=~"{LLMDEPLOYMENT_VAR}{ENGINE_NAME_SUFFIX_PATTERN}"}}'
    )


def engine_pods() -> str:
    """One series (value 1) per engine pod of the selected LLMDeployment, labels namespace, pod:
    join kube-state-metrics pod series to it with `* on (namespace, pod) group_left ()`."""
    return (
        "max by (namespace, pod) (kube_pod_labels"
        f'{{namespace="{NAMESPACE_VAR}", {KSM_DEPLOYMENT_LABEL}="{LLMDEPLOYMENT_VAR}"}})'
    )


def operator(metric: str, extra: str = "") -> str:
    """An operator metric of the selected LLMDeployment."""
    return engine(metric, extra)


def quantile(q: float, histogram: str, by: str = "", window: str = RATE) -> str:
    """histogram_quantile over the rate of `histogram` (a selector of the `_bucket` series)."""
    labels = ", ".join(x for x in ("le", by) if x)
    return f"histogram_quantile({q}, sum by ({labels}) (rate({histogram}[{window}])))"


# $1-style references (label_replace replacements) are not variables: a name starts with a letter.
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\[\[([A-Za-z_]\w*)\]\]|\$([A-Za-z_]\w*)")

# What Grafana would put for its built-in interval variables, as PromQL durations.
DEFAULT_BUILTINS: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "__range_s": "3600",
    "__interval_ms": "15000",
}


def substitute(
    expr: str, variables: Mapping[str, str], builtins: Mapping[str, str] | None = None
) -> str:
    """`expr` with Grafana variables ($name, ${name}, ${name:format}, [[name]]) replaced by
    `variables`, and the built-ins ($__rate_interval, $__interval, $__range...) by `builtins`
    (default DEFAULT_BUILTINS). Raises KeyError naming a variable that has no value, so a test
    never sends a half-substituted expression to Prometheus."""
    values = {**DEFAULT_BUILTINS, **(builtins or {}), **variables}

    def replace(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g is not None)
        if name not in values:
            raise KeyError(f"no value for Grafana variable ${name} in: {expr}")
        return values[name]

    return _VARIABLE.sub(replace, expr)
