"""`spec.workload` and `spec.slo`: the traffic a plan's speed is predicted for, and the latency it
must meet."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule

DEFAULT_PROMPT_TOKENS = 512
DEFAULT_OUTPUT_TOKENS = 256


class WorkloadSpec(ApiModel):
    """A typical request. The planner predicts tokens/s, TTFT and ITL for it and sizes vLLM's
    concurrency (--max-num-seqs) to the sequences of this length the KV cache holds."""

    prompt_tokens: int = Field(
        default=DEFAULT_PROMPT_TOKENS,
        ge=1,
        le=10_000_000,
        description=(
            f"Typical prompt length in tokens. Default {DEFAULT_PROMPT_TOKENS}. Prompt plus "
            "output must fit in the context (engine.maxModelLen)."
        ),
    )
    output_tokens: int = Field(
        default=DEFAULT_OUTPUT_TOKENS,
        ge=1,
        le=10_000_000,
        description=f"Typical generated tokens per request. Default {DEFAULT_OUTPUT_TOKENS}.",
    )


class SloSpec(ApiModel):
    """Latency targets. With an SLO the planner picks the cheapest layout and the per-pod
    concurrency that meet it, and refuses the spec (with what the best layout would give) when
    none can."""

    cel_rules = (
        CelRule(
            rule="has(self.ttftMillis) || has(self.itlMillis)",
            message="set ttftMillis, itlMillis or both",
            holds=lambda s: s.ttft_millis is not None or s.itl_millis is not None,
            field="ttftMillis",
        ),
    )

    ttft_millis: int | None = Field(
        default=None,
        ge=1,
        le=600_000,
        description=(
            "Time to first token for a prompt of workload.promptTokens on an idle pod, "
            "milliseconds (1 to 600000)."
        ),
    )
    itl_millis: int | None = Field(
        default=None,
        ge=1,
        le=60_000,
        description=(
            "Inter-token latency (time per output token of one request) with the pod at its "
            "planned concurrency, milliseconds (1 to 60000)."
        ),
    )
