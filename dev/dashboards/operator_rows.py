"""The rows of the "LLMFleet / Operator" dashboard: the operator's own work (operator_row.py),
the LLMDeployments' conditions and planner decisions, plans against engines, and (batch.py) batch
on spare GPUs."""

from __future__ import annotations

from . import promql as q
from .batch import BATCH_ROW
from .model import Panel, Query, Row
from .operator_row import OPERATOR_ROW

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
    OPERATOR_ROW,
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
