"""The planner's predicted start of one engine pod, phase by phase, as `llmfleet plan` and
status.plan.startup carry it (docs/planner.md, "Cold start")."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel


class StartPhases(ApiModel):
    """Seconds each phase of one engine pod's start is predicted to take, in order."""

    scheduling_seconds: float = Field(
        ge=0, description="Scheduling and container start, the image already on the node."
    )
    imports_seconds: float = Field(
        ge=0, description="Python and vLLM imports, engine and worker processes started."
    )
    download_seconds: float = Field(
        ge=0, description="Downloading the pod's weights into the Hugging Face cache; 0 if held."
    )
    weight_load_seconds: float = Field(
        ge=0, description="Reading each GPU's share of the weights onto it."
    )
    compile_seconds: float = Field(
        ge=0, description="torch.compile, afresh or from a warm compile cache."
    )
    cuda_graphs_seconds: float = Field(ge=0, description="CUDA graph capture.")
    kv_profiling_seconds: float = Field(
        ge=0, description="The profiling run, the KV cache's allocation and vLLM's warm-up."
    )
    api_ready_seconds: float = Field(ge=0, description="The API server up and /health answering.")
    total_seconds: float = Field(ge=0, description="The pod's creation to ready: every phase.")


class StartupPrediction(ApiModel):
    """One engine pod's predicted start: cold (an empty compile cache, the weights downloaded)
    and warm (a compile cache from an earlier start; the weights held by spec.model.cache)."""

    cold: StartPhases = Field(description="An empty compile cache, as every new pod has today.")
    warm: StartPhases = Field(description="A warm compile cache, and cached weights if any.")
    probe_budget_seconds: int = Field(
        ge=1,
        description=(
            "The engine's startupProbe budget (failureThreshold x periodSeconds): twice the "
            "cold start from the container's start, and never below the floor."
        ),
    )
    weight_load_gib_per_second: float = Field(
        alias="weightLoadGiBPerSecond",
        gt=0,
        description="Disk or network bandwidth per GPU the weight load is predicted at.",
    )
    download_gib_per_second: float = Field(
        alias="downloadGiBPerSecond",
        gt=0,
        description="Bandwidth the download from the model's hub is predicted at.",
    )
