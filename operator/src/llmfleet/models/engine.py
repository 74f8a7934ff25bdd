"""`spec.engine`: the vLLM server image and the knobs that override the planner's choices."""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import Field, StringConstraints

from llmfleet.models.adapters import LoraSpec
from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.compile_cache import COMPILE_CACHE_DESCRIPTION, CompileCache
from llmfleet.models.defaults import (
    DEFAULT_CPU_KV_CACHE_GIB,
    DEFAULT_ENGINE_IMAGE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    MAX_EXTRA_ARG_LENGTH,
    MAX_EXTRA_ARGS,
)
from llmfleet.models.podmeta import MAX_POD_METADATA_ENTRIES, LabelValue, pod_metadata_rules
from llmfleet.models.refs import SecretKeyRef
from llmfleet.models.stall import StallDetection

SchedulingPolicy = Literal["fcfs", "priority"]
# vLLM 0.32's --kv-cache-dtype values (its CacheDType) that the planner sizes: the 16-bit types
# and fp8, one byte per element. Its other values (fp8_inc for Intel Gaudi, the DeepSeek sparse
# MLA, nvfp4, turboquant and per-token-head layouts) are not offered.
KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
KV_CACHE_DTYPES: tuple[KvCacheDtype, ...] = get_args(KvCacheDtype)

# Flags the operator owns: the Service and probes target the port it sets, the GPU count per
# pod follows the planned tensor-parallel size, a multi-node replica's pods find each other
# with the launcher flags it sets, the model and its served name and revision are spec.model's
# (the router, status and the planner's config.json use them), and the shutdown timeout follows
# the pod's grace period. Underscored spellings are accepted by vLLM too.
RESERVED_ARG_PATTERN = (
    r"^(-tp|-pp|-dp|--(host|port|(tensor|pipeline|data)[-_]parallel[-_]size"
    r"|nnodes|node[-_]rank|master[-_](addr|port)|headless"
    r"|model|served[-_]model[-_]name|revision|shutdown[-_]timeout))(=.*)?$"
)
_RESERVED_ARG = re.compile(RESERVED_ARG_PATTERN)

# Kubernetes resource.Quantity, e.g. "500m", "2", "8Gi".
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=64)]
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
ExtraArg = Annotated[str, StringConstraints(max_length=MAX_EXTRA_ARG_LENGTH)]


def _known_resources(amounts: dict[str, str] | None) -> bool:
    return amounts is None or all(name in RESOURCE_NAMES for name in amounts)


_RESOURCE_NAMES_CEL = "[" + ", ".join(f"'{name}'" for name in RESOURCE_NAMES) + "]"
_RESOURCE_MESSAGE = (
    "only cpu, memory and ephemeral-storage may be set; the operator sets GPU resources "
    "from the plan"
)


class ContainerResources(ApiModel):
    """Extra cpu/memory for the vLLM container, merged with what the operator sets."""

    cel_rules = (
        CelRule(
            rule=f"!has(self.requests) || self.requests.all(k, k in {_RESOURCE_NAMES_CEL})",
            message=_RESOURCE_MESSAGE,
            holds=lambda r: _known_resources(r.requests),
            field="requests",
        ),
        CelRule(
            rule=f"!has(self.limits) || self.limits.all(k, k in {_RESOURCE_NAMES_CEL})",
            message=_RESOURCE_MESSAGE,
            holds=lambda r: _known_resources(r.limits),
            field="limits",
        ),
    )

    requests: dict[str, Quantity] | None = Field(
        default=None,
        max_length=len(RESOURCE_NAMES),
        description=(
            "Resource requests by name (cpu, memory, ephemeral-storage) as Kubernetes "
            'quantities, e.g. {cpu: "4", memory: 32Gi}.'
        ),
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        max_length=len(RESOURCE_NAMES),
        description=(
            "Resource limits by name (cpu, memory, ephemeral-storage) as Kubernetes quantities."
        ),
    )


class EngineSpec(ApiModel):
    """vLLM server settings. Unset fields are derived by the planner."""

    cel_rules = (
        CelRule(
            rule=(
                "!has(self.maxNumSeqs) || !has(self.maxNumBatchedTokens) || "
                "self.maxNumBatchedTokens >= self.maxNumSeqs"
            ),
            message=(
                "maxNumBatchedTokens must be at least maxNumSeqs (vLLM schedules at least "
                "one token per running sequence in each step)"
            ),
            holds=lambda e: (
                e.max_num_seqs is None
                or e.max_num_batched_tokens is None
                or e.max_num_batched_tokens >= e.max_num_seqs
            ),
            field="maxNumBatchedTokens",
        ),
        CelRule(
            rule=(
                "!has(self.extraArgs) || "
                f"self.extraArgs.all(a, !a.matches('{RESERVED_ARG_PATTERN}'))"
            ),
            message=(
                "extraArgs must not set --host, --port, --tensor-parallel-size, "
                "--pipeline-parallel-size, --data-parallel-size or the multi-node launcher's "
                "--nnodes, --node-rank, --master-addr, --master-port, --headless: the operator "
                "sets them from the plan (choose the layout with spec.strategy and spec.gpus); "
                "nor --model, --served-model-name, --revision (set spec.model's name, "
                "servedModelName, revision) or --shutdown-timeout (the operator sets it from "
                "the pod's grace period)"
            ),
            holds=lambda e: not any(_RESERVED_ARG.search(arg) for arg in e.extra_args),
            field="extraArgs",
        ),
        CelRule(
            rule="!has(self.extraArgs) || size(self.extraArgs) == 0 || "
            "self.extraArgs[0].startsWith('-')",
            message=(
                "extraArgs must start with a flag (--flag value or --flag=value): vllm serve "
                "takes the model, spec.model.name, as its only positional argument"
            ),
            holds=lambda e: not e.extra_args or e.extra_args[0].startswith("-"),
            field="extraArgs",
        ),
        *pod_metadata_rules(lambda e: e.pod_labels, lambda e: e.pod_annotations),
    )

    # No schema default: the API server would write it into every stored spec, and the
    # operator's own default (--default-engine-image) could never apply.
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description=(
            "vLLM OpenAI-compatible server image. Other versions may need different "
            "extraArgs. Default: the operator's default engine image (its "
            "--default-engine-image, Helm chart value engine.defaultImage; "
            f"{DEFAULT_ENGINE_IMAGE} unless set otherwise). An LLMBatchJob's default is "
            "the LLMFleet vLLM image, which holds the batch runner."
        ),
    )
    max_model_len: int | None = Field(
        default=None,
        ge=16,
        description=(
            "Longest sequence (prompt + output) in tokens, vLLM --max-model-len. Default: "
            "the smaller of 8192 and the model's maxPositionEmbeddings."
        ),
    )
    gpu_memory_utilization: float = Field(
        default=DEFAULT_GPU_MEMORY_UTILIZATION,
        gt=0,
        le=1,
        description=(
            "Fraction of each GPU's memory vLLM may use for weights, activations and KV "
            "cache, in (0, 1]. Default 0.9."
        ),
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Most sequences one replica runs at once, vLLM --max-num-seqs. Default: derived "
            "from KV cache capacity, at most 256."
        ),
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=16,
        description=(
            "Most tokens one replica processes per scheduler step, vLLM "
            "--max-num-batched-tokens. Default 8192 for objective Throughput, 2048 for "
            "Latency (long prompts are prefilled in chunks)."
        ),
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto",
        description=(
            "Element type of the KV cache, vLLM --kv-cache-dtype. auto stores it in the "
            "model's activation dtype (2 bytes per element for 16-bit models); fp8 (e4m3 on "
            "NVIDIA GPUs), fp8_e4m3 and fp8_e5m2 store 1 byte per element, so the cache holds "
            "twice the tokens and decoding reads half the bytes, at some cost in accuracy "
            "(vLLM uses per-layer scales of 1.0 unless the checkpoint carries its own). The "
            "planner sizes the cache and predicts speed with it, and refuses what no attention "
            "backend of the engine reads (fp8_e5m2 for multi-latent attention on GPUs; on CPUs, "
            "anything but auto and the fp8 types). One of auto, bfloat16, float16, fp8, "
            "fp8_e4m3, fp8_e5m2. Default auto."
        ),
    )
    scheduling_policy: SchedulingPolicy = Field(
        default="fcfs",
        description=(
            "vLLM --scheduling-policy: fcfs serves requests in arrival order; priority uses "
            "the request's priority field. One of fcfs, priority. Default fcfs."
        ),
    )
    extra_args: tuple[ExtraArg, ...] = Field(
        default=(),
        max_length=MAX_EXTRA_ARGS,
        description=(
            "Flags appended verbatim to vLLM's command line (vllm serve MODEL ...), the first "
            "item a flag. A flag given here (as --flag value or --flag=value) replaces the "
            "derived flag of the same name; numeric overrides of --max-model-len, "
            "--gpu-memory-utilization, --max-num-seqs, --max-num-batched-tokens, --max-loras, "
            "--max-lora-rank and --max-cpu-loras are also used by the planner, as is "
            "--kv-cache-dtype (one of kvCacheDtype's values), and --enable-lora turns LoRA on "
            "as engine.lora does. Unless spec.engine.image is set, a flag the default engine's "
            "vLLM does not know (misspelt, removed, or abbreviated), or a value outside a flag's "
            "choices, is refused with Planned=False naming it."
        ),
    )
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description=(
            "Secret key holding an API key that clients must send as a bearer token; "
            "passed to vLLM as VLLM_API_KEY. Without it the endpoint is unauthenticated. With "
            "LoRA on (an LLMDeployment's spec.adapters or spec.engine.lora) the operator reads it "
            "too, and sends it on its calls to the engines' LoRA API: it then needs `get` on "
            "Secrets (Helm chart value rbac.readSecrets), or AdaptersReady says it cannot read "
            "the key."
        ),
    )
    cpu_kv_cache_gib: float = Field(
        default=DEFAULT_CPU_KV_CACHE_GIB,
        alias="cpuKVCacheGiB",
        gt=0,
        le=4_096,
        description=(
            "CPU-only serving (no spec.gpus): KV cache size in GiB, passed as "
            "VLLM_CPU_KVCACHE_SPACE. Ignored with GPUs. Default 4."
        ),
    )
    lora: LoraSpec | None = Field(
        default=None,
        description=(
            "Room for LoRA adapters (spec.adapters) in every engine, and a claim to read them "
            "from; unset fields are derived. LoRA is on when this is set or spec.adapters is "
            "not empty. vLLM fixes that at start, so set it to keep LoRA on while there are no "
            "adapters: without it, adding the first adapter or removing the last restarts the "
            "engines once. Adding or removing other adapters restarts nothing. LLMDeployment "
            "only."
        ),
    )
    stall_detection: StallDetection | None = Field(
        default=None,
        description=(
            "Take an engine whose vLLM core stopped producing tokens (its /health still "
            "answering) out of service, then restart it; off when unset. LLMDeployment only."
        ),
    )
    compile_cache: CompileCache = Field(default="auto", description=COMPILE_CACHE_DESCRIPTION)
    resources: ContainerResources | None = Field(
        default=None,
        description=(
            "Extra cpu/memory requests and limits for the vLLM container. GPU resources "
            "always come from the plan."
        ),
    )
    pod_labels: dict[str, LabelValue] | None = Field(
        default=None,
        max_length=MAX_POD_METADATA_ENTRIES,
        description=(
            "Extra labels on the engine pods (a multi-node replica's leader and workers alike; "
            "an LLMBatchJob's pods), e.g. a service mesh's opt-out or cost-allocation labels. "
            "Keys with the llmfleet.dev/ prefix and app.kubernetes.io/name, instance, "
            "managed-by and component are refused: the operator sets them and selects the "
            "pods by them. At most 64. Changing them rolls this LLMDeployment's engine pods "
            "(they are part of the pod template), as any change to spec.engine does."
        ),
    )
    pod_annotations: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_POD_METADATA_ENTRIES,
        description=(
            "Extra annotations on the engine pods (a multi-node replica's leader and workers "
            "alike; an LLMBatchJob's pods), e.g. a service mesh's or a cost tool's settings. "
            "Keys with the llmfleet.dev/ prefix and prometheus.io/scrape, port and path are "
            "refused: the operator sets them. At most 64. Changing them rolls this "
            "LLMDeployment's engine pods (they are part of the pod template), as any change to "
            "spec.engine does."
        ),
    )
