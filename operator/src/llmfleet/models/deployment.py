"""`LLMDeployment.spec`: the whole user-facing specification."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmfleet.models.adapters import ADAPTERS_MOUNT_PATH, MAX_ADAPTERS, AdapterSpec
from llmfleet.models.autoscaling import AutoscalingSpec
from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.engine import EngineSpec
from llmfleet.models.gpus import GpuSpec
from llmfleet.models.model_spec import ModelSpec
from llmfleet.models.router import RouterSpec
from llmfleet.models.workload import SloSpec, WorkloadSpec

KIND = "LLMDeployment"
PLURAL = "llmdeployments"
SINGULAR = "llmdeployment"
SHORT_NAMES = ("llmd",)
CATEGORIES = ("llmfleet",)
# The operator names Services <name> and <name>-router (the longest suffix of its children), and
# a Service name is a DNS-1035 label of at most 63 characters.
LONGEST_CHILD_SUFFIX = "-router"
MAX_NAME_LENGTH = 63 - len(LONGEST_CHILD_SUFFIX)
NAME_RULE = {
    "rule": (
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && "
        f"size(self.metadata.name) <= {MAX_NAME_LENGTH}"
    ),
    "message": (
        f"metadata.name must be at most {MAX_NAME_LENGTH} characters of lowercase letters, "
        "digits and '-', starting with a letter and ending with a letter or digit: it names "
        f"the Services <name> and <name>{LONGEST_CHILD_SUFFIX}, and Kubernetes limits Service "
        "names to 63 such characters"
    ),
}

Strategy = Literal["Auto", "SinglePod", "MultiPod", "MultiNode"]
Objective = Literal["Throughput", "Latency"]


# vLLM's flag, in either spelling, that turns LoRA on without spec.engine.lora.
_ENABLE_LORA_FLAGS = ("--enable-lora", "--enable_lora")


def _adapter_names_unique(spec: LLMDeploymentSpec) -> bool:
    names = [adapter.name for adapter in spec.adapters]
    return len(set(names)) == len(names)


def _adapter_paths_mounted(spec: LLMDeploymentSpec) -> bool:
    lora = spec.engine.lora
    return (lora is not None and lora.claim is not None) or not any(
        a.source == ADAPTERS_MOUNT_PATH or a.source.startswith(f"{ADAPTERS_MOUNT_PATH}/")
        for a in spec.adapters
    )


def _max_model_len_within_context(spec: LLMDeploymentSpec) -> bool:
    architecture = spec.model.architecture
    max_model_len = spec.engine.max_model_len
    return (
        architecture is None
        or max_model_len is None
        or max_model_len <= architecture.max_position_embeddings
    )


class LLMDeploymentSpec(ApiModel):
    """A model served by a right-sized fleet of vLLM servers."""

    cel_rules = (
        CelRule(
            rule=(
                "!has(self.gpus) || self.strategy != 'SinglePod' || !has(self.gpus.perNode) || "
                "self.gpus.count <= self.gpus.perNode"
            ),
            message=(
                "strategy SinglePod needs gpus.count at most gpus.perNode: tensor parallelism "
                "does not span nodes (use strategy Auto or MultiPod)"
            ),
            holds=lambda s: (
                s.gpus is None
                or s.strategy != "SinglePod"
                or s.gpus.per_node is None
                or s.gpus.count <= s.gpus.per_node
            ),
            field="strategy",
        ),
        CelRule(
            rule="has(self.gpus) || self.strategy != 'MultiNode'",
            message=(
                "strategy MultiNode needs gpus: it spans GPU nodes (use strategy Auto or SinglePod)"
            ),
            holds=lambda s: s.gpus is not None or s.strategy != "MultiNode",
            field="strategy",
        ),
        CelRule(
            rule="has(self.gpus) || self.strategy != 'MultiPod'",
            message=(
                "strategy MultiPod needs gpus: CPU-only serving runs one pod per replica "
                "(use strategy Auto or SinglePod)"
            ),
            holds=lambda s: s.gpus is not None or s.strategy != "MultiPod",
            field="strategy",
        ),
        CelRule(
            rule=(
                "!has(self.engine) || !has(self.engine.maxModelLen) || "
                "!has(self.model.architecture) || "
                "self.engine.maxModelLen <= self.model.architecture.maxPositionEmbeddings"
            ),
            message=("engine.maxModelLen must be at most model.architecture.maxPositionEmbeddings"),
            holds=_max_model_len_within_context,
            field="engine.maxModelLen",
        ),
        CelRule(
            rule=(
                "!has(self.autoscaling) || !has(self.autoscaling.minReplicas) || "
                "self.autoscaling.minReplicas > 0 || !has(self.router) || "
                "!has(self.router.enabled) || self.router.enabled"
            ),
            message=(
                "autoscaling.minReplicas 0 needs the router (router.enabled true or unset): it "
                "holds the requests that arrive while no engine runs"
            ),
            holds=lambda s: s.autoscaling.min_replicas != 0 or s.router.enabled is not False,
            field="router.enabled",
        ),
        CelRule(
            rule=(
                "!has(self.adapters) || "
                "self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))"
            ),
            message=(
                "adapters must have unique names: the name is what clients put in the OpenAI "
                "API model field to pick the adapter"
            ),
            holds=_adapter_names_unique,
            field="adapters",
        ),
        CelRule(
            rule=(
                "!has(self.adapters) || self.adapters.all(a, a.name != "
                "(has(self.model.servedModelName) ? self.model.servedModelName : "
                "self.model.name))"
            ),
            message=(
                "adapters must not be named as the base model is served (model.servedModelName, "
                "else model.name): clients pick the base model or an adapter by that name"
            ),
            holds=lambda s: all(a.name != s.served_model_name for a in s.adapters),
            field="adapters",
        ),
        CelRule(
            rule=(
                "!has(self.adapters) || (has(self.engine) && has(self.engine.lora) && "
                "has(self.engine.lora.claim)) || self.adapters.all(a, a.source != "
                f"'{ADAPTERS_MOUNT_PATH}' && !a.source.startsWith('{ADAPTERS_MOUNT_PATH}/'))"
            ),
            message=(
                f"adapters with a source under {ADAPTERS_MOUNT_PATH} need engine.lora.claim: "
                f"{ADAPTERS_MOUNT_PATH} is where the engines mount that claim, and holds nothing "
                "without it"
            ),
            holds=_adapter_paths_mounted,
            field="adapters",
        ),
    )

    model: ModelSpec = Field(description="The model to serve.")
    gpus: GpuSpec | None = Field(
        default=None,
        description=(
            "GPUs to lay the model out on. Omit for CPU-only serving: one vLLM CPU pod, "
            "KV cache sized by engine.cpuKVCacheGiB."
        ),
    )
    strategy: Strategy = Field(
        default="Auto",
        description=(
            "Layout. SinglePod: one pod using all gpus.count GPUs with tensor parallelism. "
            "MultiPod: at least two pods, their size chosen as for Auto. "
            "MultiNode: each replica spans nodes, tensor parallel within a node and pipeline "
            "parallel across nodes (a LeaderWorkerSet group). "
            "Auto: whichever layout spec.slo or the objective prefers by the planner's "
            "predictions (by memory alone for GPUs without performance constants), MultiNode "
            "when the model fits no single node. One of Auto, SinglePod, MultiPod, MultiNode. "
            "Default Auto."
        ),
    )
    objective: Objective = Field(
        default="Throughput",
        description=(
            "What Auto optimizes, by the planner's predictions for spec.workload: Throughput "
            "(the layout with the most predicted output tokens/s per GPU) or Latency (the "
            "lowest predicted inter-token latency). spec.slo, when set, decides instead. "
            "Default Throughput."
        ),
    )
    workload: WorkloadSpec | None = Field(
        default=None,
        description=(
            "The typical request the plan's speed is predicted for, and vLLM's concurrency "
            "sized by. Default 512 prompt and 256 output tokens (stated in status.predicted)."
        ),
    )
    slo: SloSpec | None = Field(
        default=None,
        description=(
            "Latency targets (ttftMillis, itlMillis). When set, the planner picks the fewest "
            "GPUs per pod and the per-pod concurrency that meet them, instead of the objective."
        ),
    )
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        description="vLLM server settings; unset fields are derived by the planner.",
    )
    adapters: tuple[AdapterSpec, ...] = Field(
        default=(),
        max_length=MAX_ADAPTERS,
        description=(
            "LoRA adapters of the model, each served under its own name beside the base model. "
            "The operator loads them into the running engines, so adding or removing one "
            "restarts nothing, except the first added or the last removed while "
            "spec.engine.lora is unset (vLLM turns LoRA on or off only at start). How many run "
            f"at once, and their highest rank: spec.engine.lora. At most {MAX_ADAPTERS}."
        ),
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        description="Queue-depth autoscaling of the planned pods.",
    )
    router: RouterSpec = Field(
        default_factory=RouterSpec,
        description=(
            "The vLLM Router in front of the engine pods; its Service is the endpoint in status."
        ),
    )

    @property
    def served_model_name(self) -> str:
        """The name clients use for the base model."""
        return self.model.served_model_name or self.model.name

    @property
    def lora_enabled(self) -> bool:
        """Whether the engines run with LoRA (vLLM --enable-lora): spec.engine.lora set,
        adapters listed, or --enable-lora among spec.engine.extraArgs."""
        flags = (arg.split("=", 1)[0] for arg in self.engine.extra_args)
        return (
            self.engine.lora is not None
            or bool(self.adapters)
            or any(flag in _ENABLE_LORA_FLAGS for flag in flags)
        )
