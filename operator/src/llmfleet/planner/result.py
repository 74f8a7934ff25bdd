"""`Plan`: the layout the planner chose, with the numbers behind it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from llmfleet.models.base import ApiModel
from llmfleet.models.standby import StandbyPlan
from llmfleet.models.startup import StartupPrediction
from llmfleet.models.status import PlannedStrategy, PlanSummary, Prediction
from llmfleet.planner.memory import GIB


class Candidate(ApiModel):
    """One layout the planner considered, with its memory fit, predicted speed and verdict."""

    strategy: PlannedStrategy = Field(description="SinglePod, MultiPod or MultiNode.")
    tensor_parallel_size: int = Field(ge=1, description="GPUs per pod (tensor parallel).")
    pipeline_parallel_size: int = Field(
        default=1, ge=1, description="Pipeline stages per replica, one node each (MultiNode)."
    )
    replicas: int = Field(ge=0, description="Pods the GPUs make at this size.")
    kv_cache_tokens_per_replica: int = Field(ge=0, description="KV cache of one pod, tokens.")
    max_num_seqs: int = Field(ge=0, description="Sequences per pod the plan would allow.")
    predicted: Prediction | None = Field(default=None, description="Predicted speed of one pod.")
    chosen: bool = Field(default=False, description="The layout the planner chose.")
    verdict: str = Field(description="Why it was chosen, or why it lost.")


class LoraPlan(ApiModel):
    """vLLM's LoRA settings and the memory they take, fixed whatever the adapter list holds."""

    max_adapters: int = Field(ge=1, description="vLLM --max-loras: adapters in one batch.")
    max_rank: int = Field(ge=1, description="vLLM --max-lora-rank: the highest adapter rank.")
    max_cpu_adapters: int = Field(
        ge=1, description="vLLM --max-cpu-loras: adapters each worker keeps in host memory."
    )
    gpu_bytes_per_gpu: int = Field(
        alias="gpuBytesPerGPU",
        ge=0,
        description="vLLM's LoRA buffers on each GPU (in host memory on CPU), bytes.",
    )
    cpu_bytes_per_pod: int = Field(
        ge=0, description="The CPU cache of adapters of all of a pod's workers, bytes."
    )

    @property
    def gpu_gib_per_gpu(self) -> float:
        return self.gpu_bytes_per_gpu / GIB

    @property
    def cpu_gib_per_pod(self) -> float:
        return self.cpu_bytes_per_pod / GIB


class Plan(ApiModel):
    """A fleet layout for one LLMDeploymentSpec. Serialise with
    `model_dump(by_alias=True, mode="json")`; the JSON keys are a stable interface."""

    strategy: PlannedStrategy = Field(description="SinglePod, MultiPod or MultiNode.")
    replicas: int = Field(
        ge=1, description="Replicas at the planned (minimum) scale: pods, or MultiNode groups."
    )
    gpus_per_replica: int = Field(
        ge=0, description="GPUs per replica (across its nodes); 0 for CPU-only serving."
    )
    tensor_parallel_size: int = Field(ge=1, description="vLLM --tensor-parallel-size.")
    pipeline_parallel_size: int = Field(
        default=1,
        ge=1,
        description="vLLM --pipeline-parallel-size: stages per replica, one node each.",
    )
    weights_gib_per_gpu: float = Field(
        alias="weightsGiBPerGPU", ge=0, description="Weights held by each GPU, GiB; 0 on CPU."
    )
    kv_cache_tokens_per_replica: int = Field(
        ge=0, description="Tokens of KV cache per pod (every GPU holds its share of each)."
    )
    kv_cache_tokens_compile_cached: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Tokens of KV cache per pod whose engine loads an earlier start's torch.compile "
            "cache (spec.engine.compileCache): more than a fresh compile's for w8a8 weights. "
            "Sequences are planned by kvCacheTokensPerReplica; None on CPU."
        ),
    )
    max_concurrent_sequences: int = Field(
        ge=1, description="Sequences one pod runs at once (vLLM --max-num-seqs)."
    )
    vllm_args: tuple[str, ...] = Field(
        description=(
            "vLLM engine flags, without the model (`vllm serve` takes it first) and "
            "--host/--port (the renderer adds those)."
        )
    )
    reason: str = Field(description="Why this layout, with the numbers.")
    min_replicas: int = Field(
        ge=0, description="Autoscaler lower bound (replicas if disabled; 0: scales to zero)."
    )
    max_replicas: int = Field(ge=1, description="Autoscaler upper bound (replicas if disabled).")
    total_gpus: int = Field(ge=0, description="replicas x gpusPerReplica.")
    weights_gib: float = Field(alias="weightsGiB", ge=0, description="All weights, GiB.")
    weights_format: str = Field(
        default="",
        description=(
            "The weights' format and where the planner learnt it: a checkpoint's "
            "quantization_config, or spec.model.quantization."
        ),
    )
    kv_cache_gib_per_gpu: float = Field(
        alias="kvCacheGiBPerGPU", ge=0, description="KV cache per GPU, GiB; 0 on CPU."
    )
    reserve_gib_per_gpu: float = Field(
        alias="reserveGiBPerGPU",
        ge=0,
        description="Activations and runtime kept out of the KV cache per GPU, GiB; 0 on CPU.",
    )
    max_model_len: int = Field(ge=16, description="vLLM --max-model-len.")
    max_num_batched_tokens: int = Field(ge=1, description="vLLM --max-num-batched-tokens.")
    shm_size_gib: int = Field(
        alias="shmSizeGiB", ge=1, description="Suggested /dev/shm size (memory emptyDir), GiB."
    )
    startup_budget_seconds: int = Field(
        ge=1,
        description=(
            "Seconds the engine's startupProbe allows from the container's start: "
            "startup.probeBudgetSeconds on GPUs."
        ),
    )
    startup: StartupPrediction | None = Field(
        default=None,
        description="One engine pod's predicted start per phase, cold and warm; GPU plans only.",
    )
    cpu_memory_gib: int | None = Field(
        default=None,
        alias="cpuMemoryGiB",
        description="CPU-only serving: suggested memory request (weights + KV cache + runtime).",
    )

    predicted: Prediction | None = Field(
        default=None,
        description="Predicted speed of one pod for the workload; None without GPU constants.",
    )
    candidates: tuple[Candidate, ...] = Field(
        default=(), description="Every layout considered, the chosen one included."
    )
    target_queue_depth: int = Field(
        default=1,
        ge=1,
        description="HPA target of requests waiting per pod (spec, or derived from concurrency).",
    )

    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="nodeSelector of the engine pods: the GPU product and the profile's.",
    )
    tolerations: tuple[dict[str, Any], ...] = Field(
        default=(), description="Tolerations of the engine pods from the GPU profile."
    )
    lora: LoraPlan | None = Field(
        default=None, description="LoRA settings and memory; None when LoRA is off."
    )
    standby: StandbyPlan | None = Field(
        default=None,
        description="Standby engines and what they hold asleep; None without standby replicas.",
    )

    @model_serializer(mode="wrap")
    def _without_absent_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Plans without LoRA (or on CPUs, without a start prediction) serialise as they did
        # before those parts existed.
        data: dict[str, Any] = handler(self)
        if self.lora is None:
            data.pop("lora", None)
        if self.standby is None:
            data.pop("standby", None)
        if self.startup is None:
            data.pop("startup", None)
        return data

    def summary(self) -> PlanSummary:
        """The part of the plan the operator publishes in status.plan."""
        return PlanSummary(
            strategy=self.strategy,
            replicas=self.replicas,
            gpus_per_replica=self.gpus_per_replica,
            tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=(
                self.pipeline_parallel_size if self.pipeline_parallel_size > 1 else None
            ),
            kv_cache_tokens_per_replica=self.kv_cache_tokens_per_replica,
            kv_cache_tokens_compile_cached=self.kv_cache_tokens_compile_cached,
            max_concurrent_sequences=self.max_concurrent_sequences,
            standby=self.standby,
            startup=self.startup,
        )
