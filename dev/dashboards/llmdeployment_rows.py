"""The rows of the "LLMFleet / LLMDeployment" dashboard: one LLMDeployment's queue and
autoscaling, engine load, latency, layout and startup."""

from __future__ import annotations

from . import promql as q
from .model import Panel, Query, Row

QUANTILES = (0.5, 0.95, 0.99)


def _quantiles(histogram: str) -> tuple[Query, ...]:
    return tuple(Query(q.quantile(x, histogram), f"p{round(x * 100)}") for x in QUANTILES)


def _latency(title: str, description: str, histogram: str) -> Panel:
    """A third of the Latency row: the quantiles of one of the engines' latency histograms."""
    return Panel(title, description, _quantiles(q.engine(histogram + "_bucket")), unit="s", width=8)


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
            _latency(
                "Time to first token",
                "Time from a request's arrival to its first token "
                "(vllm:time_to_first_token_seconds): queueing plus prefill.",
                q.VLLM_TTFT,
            ),
            _latency(
                "Inter-token latency",
                "Time between two output tokens of a request (vllm:inter_token_latency_seconds): "
                "the decode speed a user sees.",
                q.VLLM_ITL,
            ),
            _latency(
                "End-to-end request latency",
                "Time from a request's arrival to its last token "
                "(vllm:e2e_request_latency_seconds).",
                q.VLLM_E2E,
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
