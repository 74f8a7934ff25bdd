"""The engine settings a plan sizes with (spec.engine after defaults and extraArgs overrides),
the memory fit they give, and the vLLM arguments that set them."""

from __future__ import annotations

from dataclasses import dataclass, field

from llmfleet.catalog.hfconfig import ModelConfigError, architecture_from_config
from llmfleet.catalog.hub import Config, described, is_repo_id
from llmfleet.catalog.known_models import CATALOG_NAMES, lookup_architecture
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.engine import KV_CACHE_DTYPES, KvCacheDtype
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.models.workload import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS
from llmfleet.planner.candidates import Workload
from llmfleet.planner.engine_args import (
    EXTRA_ARGS_FIELD,
    ArgGroup,
    merge_args,
    overridden_value,
    parse_fraction_override,
    parse_int_override,
)
from llmfleet.planner.errors import PlanError
from llmfleet.planner.lora import LoraSettings, buffer_gib, lora_args, lora_settings
from llmfleet.planner.memory import GpuFit, fit_on_gpu
from llmfleet.planner.placement import Gpus
from llmfleet.planner.weights import Weights, typed

DEFAULT_MAX_MODEL_LEN = 8192
# Prefill chunk per engine step, by vLLM's own rule for its defaults: 16384 on GPUs of 70 GiB and
# more, 8192 on smaller ones and CPUs. Latency takes a smaller chunk so a prompt arriving
# mid-stream delays running sequences' next token less.
LARGE_GPU_GIB = 70
LARGE_GPU_BATCHED_TOKENS = {"Throughput": 16384, "Latency": 8192}
SMALL_BATCHED_TOKENS = {"Throughput": 8192, "Latency": 2048}
ARCHITECTURE_FIELD = "spec.model.architecture"
CATALOG_SOURCE = "the built-in catalog"


@dataclass(frozen=True)
class Settings:
    """Engine settings after defaults and extraArgs overrides; the planner sizes with these."""

    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int | None
    max_num_batched_tokens: int
    workload: Workload
    lora: LoraSettings | None = None
    weights: Weights = field(default_factory=lambda: typed("auto", "none"))
    kv_cache_dtype: KvCacheDtype = "auto"


def architecture(
    spec: LLMDeploymentSpec, model_config: Config | None = None
) -> tuple[ModelArchitecture, str]:
    """The figures to size the model by and where they came from, first found: the spec's own
    (an override), the built-in catalog's, or `model_config` (its config.json, read by the
    caller: the planner does no I/O)."""
    model = spec.model
    if model.architecture is not None:
        return model.architecture, ARCHITECTURE_FIELD
    cataloged = lookup_architecture(model.name)
    if cataloged is not None:
        return cataloged, CATALOG_SOURCE
    where = f"config.json of {described(model)}"
    if model_config is not None:
        try:
            return architecture_from_config(model_config), where
        except ModelConfigError as error:
            raise PlanError(
                ARCHITECTURE_FIELD, f"{where}: {error}", reason="ModelConfigUnsupported"
            ) from None
    if is_repo_id(model.name):
        why = f"and no config.json of {described(model)} was given"
    else:
        kind = "a path in the container" if model.name.startswith("/") else "an object-store URI"
        why = f"and is {kind}, whose config.json the operator cannot read"
    raise PlanError(
        ARCHITECTURE_FIELD,
        f"{model.name} is not in the built-in catalog {why}, so set its architecture "
        "(parametersBillions, numLayers, numAttentionHeads, numKeyValueHeads, headDim, "
        "maxPositionEmbeddings from the model's config.json). Catalog models: "
        + ", ".join(CATALOG_NAMES),
    )


# The KV cache dtypes some attention backend of vLLM 0.32 reads (supported_kv_cache_dtypes in
# vllm/v1/attention/backends/): no NVIDIA backend for multi-latent attention reads fp8_e5m2, and
# the CPU backend names the 16-bit types only as auto. Another value leaves vLLM no backend and
# the pod crash-looping.
_KV_DTYPES_READ = {
    (True, True): ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3"),
    (False, False): ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
    (False, True): ("auto",),
}


def kv_cache_dtype(
    spec: LLMDeploymentSpec, extra: tuple[ArgGroup, ...], arch: ModelArchitecture
) -> KvCacheDtype:
    """spec.engine.kvCacheDtype, or --kv-cache-dtype in extraArgs, which vLLM takes instead;
    PlanError where vLLM has no attention backend that reads it."""
    raw = overridden_value(extra, "--kv-cache-dtype")
    field = EXTRA_ARGS_FIELD if raw is not None else "spec.engine.kvCacheDtype"
    chosen = spec.engine.kv_cache_dtype if raw is None else None
    for allowed in KV_CACHE_DTYPES:
        if raw == allowed:
            chosen = allowed
    if chosen is None:
        raise PlanError(
            EXTRA_ARGS_FIELD,
            f"--kv-cache-dtype {raw!r} is not one the planner sizes; use one of "
            + ", ".join(KV_CACHE_DTYPES)
            + " (or spec.engine.kvCacheDtype)",
        )
    mla = arch.kv_lora_rank is not None
    read = _KV_DTYPES_READ.get((spec.gpus is not None, mla), KV_CACHE_DTYPES)
    if chosen not in read:
        where = "on NVIDIA GPUs" if spec.gpus is not None else "on CPUs"
        model = "multi-latent attention (kvLoraRank)" if mla else "this model"
        raise PlanError(
            field,
            f"kvCacheDtype {chosen}: no attention backend of vLLM 0.32 {where} reads it for "
            f"{model}, so the engine would not start; use one of {', '.join(read)}",
        )
    return chosen


def engine_settings(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    extra: tuple[ArgGroup, ...],
    chunks: dict[str, int],
    weights: Weights | None = None,
) -> Settings:
    engine = spec.engine
    from_args = parse_int_override(extra, "--max-model-len", 16)
    max_model_len = from_args or engine.max_model_len
    if max_model_len is None:
        max_model_len = min(DEFAULT_MAX_MODEL_LEN, arch.max_position_embeddings)
    elif max_model_len > arch.max_position_embeddings:
        field = EXTRA_ARGS_FIELD if from_args else "spec.engine.maxModelLen"
        raise PlanError(
            field,
            f"maxModelLen {max_model_len} exceeds {spec.model.name}'s context of "
            f"{arch.max_position_embeddings} tokens (maxPositionEmbeddings); use at most "
            f"{arch.max_position_embeddings}",
        )
    max_num_seqs = parse_int_override(extra, "--max-num-seqs", 1) or engine.max_num_seqs
    batched = parse_int_override(extra, "--max-num-batched-tokens", 1)
    batched = batched or engine.max_num_batched_tokens
    if batched is None:
        batched = max(chunks[spec.objective], max_num_seqs or 0)
    elif max_num_seqs is not None and batched < max_num_seqs:
        raise PlanError(
            EXTRA_ARGS_FIELD,
            f"--max-num-batched-tokens {batched} must be at least --max-num-seqs {max_num_seqs}",
        )
    utilization = parse_fraction_override(extra, "--gpu-memory-utilization")
    given = spec.workload
    workload = Workload(
        given.prompt_tokens if given else DEFAULT_PROMPT_TOKENS,
        given.output_tokens if given else DEFAULT_OUTPUT_TOKENS,
    )
    if given is None and workload.tokens > max_model_len:
        # The default workload, shrunk to a short context in the same 2:1 proportion.
        prompt = max(1, max_model_len * DEFAULT_PROMPT_TOKENS // workload.tokens)
        workload = Workload(prompt, max(1, max_model_len - prompt))
    if workload.tokens > max_model_len:
        raise PlanError(
            "spec.workload",
            f"promptTokens {workload.prompt_tokens} + outputTokens {workload.output_tokens} = "
            f"{workload.tokens} tokens, longer than maxModelLen {max_model_len}; shorten the "
            f"workload or raise spec.engine.maxModelLen (up to "
            f"{arch.max_position_embeddings})",
        )
    return Settings(
        max_model_len=max_model_len,
        gpu_memory_utilization=utilization or engine.gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        workload=workload,
        lora=lora_settings(spec, extra),
        weights=weights or typed(spec.model.dtype, spec.model.quantization),
        kv_cache_dtype=kv_cache_dtype(spec, extra, arch),
    )


def gpu_fit(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    tensor_parallel_size: int,
    *,
    fp8: bool = False,
    pipeline: int = 1,
) -> GpuFit:
    return fit_on_gpu(
        arch,
        dtype=spec.model.dtype,
        quantization=typed(spec.model.dtype, "fp8") if fp8 else settings.weights,
        kv_cache_dtype=settings.kv_cache_dtype,
        memory_gib=gpus.memory_gib,
        cuda_gib=gpus.cuda_gib,
        max_model_len=settings.max_model_len,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline,
        lora_gib=buffer_gib(arch, settings.lora, tensor_parallel_size, pipeline),
    )


def vllm_args(
    spec: LLMDeploymentSpec,
    settings: Settings,
    tensor_parallel_size: int,
    max_num_seqs: int,
    extra: tuple[ArgGroup, ...],
    *,
    pipeline_parallel_size: int = 1,
) -> tuple[str, ...]:
    model = spec.model
    # The model is no flag here: `vllm serve` takes it first, the batch runner as --model.
    derived: list[tuple[str, tuple[str, ...]]] = []
    if model.revision is not None:
        derived.append(("--revision", (model.revision,)))
    if model.served_model_name is not None:
        derived.append(("--served-model-name", (model.served_model_name,)))
    derived.append(("--dtype", (model.dtype,)))
    # Only fp8 of a 16-bit checkpoint is passed: vLLM quantizes it on load. A pre-quantized
    # checkpoint's format vLLM reads from its quantization_config, and naming awq/gptq would
    # force their slow non-Marlin kernels (int8 is not a vLLM method name at all).
    if settings.weights.online:
        derived.append(("--quantization", ("fp8",)))
    if settings.kv_cache_dtype != "auto":
        derived.append(("--kv-cache-dtype", (settings.kv_cache_dtype,)))
    derived.append(("--tensor-parallel-size", (str(tensor_parallel_size),)))
    if pipeline_parallel_size > 1:
        derived.append(("--pipeline-parallel-size", (str(pipeline_parallel_size),)))
    derived.append(("--max-model-len", (str(settings.max_model_len),)))
    if spec.gpus is not None:
        derived.append(("--gpu-memory-utilization", (f"{settings.gpu_memory_utilization:g}",)))
    derived.append(("--max-num-seqs", (str(max_num_seqs),)))
    derived.append(("--max-num-batched-tokens", (str(settings.max_num_batched_tokens),)))
    derived.append(("--scheduling-policy", (spec.engine.scheduling_policy,)))
    derived.extend(lora_args(settings.lora))
    return merge_args(derived, extra)
