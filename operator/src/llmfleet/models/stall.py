"""`spec.engine.stallDetection`: taking an engine whose vLLM core stopped producing tokens out of
service, then restarting it (docs/operator.md, "Stalled engines")."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel

# Below this a scrape every third of the window would outpace the engines' own metric updates.
MIN_WINDOW_SECONDS = 6
MAX_WINDOW_SECONDS = 86_400


class StallDetection(ApiModel):
    """Watch each ready engine's /metrics for requests running while no prompt or generated
    token is counted."""

    enabled: bool = Field(
        default=True,
        description=(
            "Whether the operator watches the engines for stalls. An engine with requests "
            "running (vllm:num_requests_running) and neither prompt nor generated tokens counted "
            "(vllm:prompt_tokens_total, vllm:generation_tokens_total) for one window is taken "
            "out of service (its readiness gate llmfleet.dev/engine-progressing turns False; "
            "Degraded=True, reason EngineStalled, names it, with a Warning Event), and deleted "
            "if it is still stalled one window later. An engine loading a LoRA adapter is not "
            "judged. Turning it on or off rolls the engine pods once (the readiness gate is "
            "part of the pod template). Default true when stallDetection is set."
        ),
    )
    window_seconds: int | None = Field(
        default=None,
        ge=MIN_WINDOW_SECONDS,
        le=MAX_WINDOW_SECONDS,
        description=(
            "Seconds without progress before an engine counts as stalled, and again before it "
            f"is restarted; {MIN_WINDOW_SECONDS} to {MAX_WINDOW_SECONDS}. Default: derived from "
            "the plan, the largest of 30 s, 1000 times the predicted inter-token latency at the "
            "planned concurrency, and 3 times the predicted prefill of a prompt of "
            "maxModelLen tokens (vLLM counts a prompt's tokens only once its prefill ends); "
            "120 s without a prediction (CPU-only serving)."
        ),
    )


def stall_watched(setting: StallDetection | None) -> bool:
    return setting is not None and setting.enabled
