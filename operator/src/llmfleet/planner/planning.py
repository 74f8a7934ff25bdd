"""`plan()`: choose the tensor-parallel size, the pod layout and vLLM's flags for a spec.

Rules, in the order they apply:

* Tensor-parallel (TP) sizes are powers of two up to gpus.perNode that divide the attention
  heads (see `parallelism`). Pods never span nodes.
* A size is a candidate when one GPU's share of the weights, the runtime reserve and the KV
  cache for at least one full-length (maxModelLen) sequence fit in memoryGiB x
  gpuMemoryUtilization (see `memory`), and the GPUs split evenly into pods of it. When none
  holds one sequence, the spec is refused with the numbers and what would fit.
* Each candidate gets --max-num-seqs = what its KV cache holds of spec.workload's requests, at
  most 512, and a predicted speed (see `candidates` and `performance`); the choice follows
  spec.slo or the objective. SinglePod allows only TP = gpus.count, MultiPod at least two pods.
  GPUs without performance constants fall back to memory rules: Throughput takes the smallest
  size holding MIN_CONCURRENT_SEQUENCES full-length sequences, Latency the widest.
* LoRA (spec.engine.lora or spec.adapters): vLLM's adapter buffers come off each GPU before the
  KV cache (see `lora`); a spec that plans without them but not with them is refused naming
  spec.engine.lora, with the settings that would fit.
* spec.engine.extraArgs are checked first against the flags of the pinned vLLM (see
  `engine_flags`): an unknown or abbreviated flag, or a value outside a flag's choices, is
  refused naming it; not with spec.engine.image set, whose vLLM may be another version.
* Derived vLLM settings: maxModelLen = min(8192, maxPositionEmbeddings); maxNumBatchedTokens =
  vLLM's own defaults by GPU size (16384 from 70 GiB, else 8192; Latency smaller), at least
  maxNumSeqs -- vLLM always prefills in chunks, so it may be below maxModelLen.

This module only picks the path: `cpu` without spec.gpus, `multinode` for a model larger than a
node (or strategy MultiNode), else `single_node`. `settings` derives the engine settings and
vLLM's flags, `choice` and `memory_layout` choose among layouts, `explain` words the reason.
"""

from __future__ import annotations

from dataclasses import replace

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.catalog.hub import Config
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.cpu import plan_cpu
from llmfleet.planner.engine_args import ArgGroup, group_args
from llmfleet.planner.engine_flags import check_engine_args, pinned_flags
from llmfleet.planner.errors import PlanError
from llmfleet.planner.lora import lora_does_not_fit
from llmfleet.planner.memory import GpuFit
from llmfleet.planner.multinode import plan_multinode
from llmfleet.planner.parallelism import tensor_parallel_sizes
from llmfleet.planner.placement import Gpus, resolve_gpus
from llmfleet.planner.result import Plan
from llmfleet.planner.settings import (
    ARCHITECTURE_FIELD,
    CATALOG_SOURCE,
    LARGE_GPU_BATCHED_TOKENS,
    LARGE_GPU_GIB,
    SMALL_BATCHED_TOKENS,
    Settings,
    architecture,
    engine_settings,
    gpu_fit,
)
from llmfleet.planner.single_node import plan_single_node
from llmfleet.planner.standby import plan_standby
from llmfleet.planner.weights import Weights, resolve_weights


def plan(
    spec: LLMDeploymentSpec,
    profiles: GpuProfiles = DEFAULT_GPU_PROFILES,
    model_config: Config | None = None,
) -> Plan:
    """Plan `spec` (its `gpus.profile` looked up in `profiles`), or raise PlanError naming the
    field to change. `model_config`: the model's config.json, which sizes it when neither
    spec.model.architecture nor the catalog does."""
    if spec.engine.image is None:
        check_engine_args(spec.engine.extra_args, pinned_flags())
    arch, source = architecture(spec, model_config)
    weights = resolve_weights(
        spec, model_config, from_config=source not in (ARCHITECTURE_FIELD, CATALOG_SOURCE)
    )
    planned = _plan(spec, profiles, arch, weights)
    where = f"Architecture from {source}. Weights: {weights.words}, from {weights.source}."
    standby = plan_standby(
        spec.autoscaling.standby,
        tensor_parallel_size=planned.tensor_parallel_size,
        pipeline_parallel_size=planned.pipeline_parallel_size,
        gpus_per_replica=planned.gpus_per_replica,
        weights_gib=planned.weights_gib,
        target_queue_depth=planned.target_queue_depth,
    )
    return planned.model_copy(
        update={
            "reason": f"{where} {planned.reason}",
            "weights_format": f"{weights.words} ({weights.source})",
            "standby": standby,
        }
    )


def _plan(
    spec: LLMDeploymentSpec, profiles: GpuProfiles, arch: ModelArchitecture, weights: Weights
) -> Plan:
    extra = group_args(spec.engine.extra_args)
    if spec.gpus is None:
        settings = engine_settings(spec, arch, extra, SMALL_BATCHED_TOKENS, weights)
        return plan_cpu(spec, arch, settings, extra)
    gpus = resolve_gpus(spec.gpus, profiles)
    chunks = LARGE_GPU_BATCHED_TOKENS if gpus.memory_gib >= LARGE_GPU_GIB else SMALL_BATCHED_TOKENS
    settings = engine_settings(spec, arch, extra, chunks, weights)
    try:
        return _plan_on_gpus(spec, gpus, arch, settings, extra)
    except PlanError as error:
        if settings.lora is None:
            raise
        refusal = error
    # Blame LoRA, with its numbers, where the spec would plan without it.
    try:
        without = _plan_on_gpus(spec, gpus, arch, replace(settings, lora=None), extra)
    except PlanError:
        raise refusal from None
    raise lora_does_not_fit(
        spec,
        arch,
        settings.lora,
        settings.max_model_len,
        without,
        kv_cache_dtype=settings.kv_cache_dtype,
    )


def _plan_on_gpus(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    extra: tuple[ArgGroup, ...],
) -> Plan:
    sizes = tensor_parallel_sizes(arch, gpus.per_node)
    fits = {size: gpu_fit(spec, gpus, arch, settings, size) for size in sizes}
    if _spans_nodes(spec, gpus, settings, sizes, fits):
        return plan_multinode(spec, gpus, arch, settings, extra, sizes)
    return plan_single_node(spec, gpus, arch, settings, extra, sizes=sizes, fits=fits)


def _spans_nodes(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    settings: Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> bool:
    """MultiNode as asked, or under Auto when no size within a node holds one full-length
    sequence and the GPUs span nodes."""
    one_node = [s for s in sizes if s <= min(gpus.count, gpus.per_node)]
    fits_one_node = any(fits[s].starts(settings.max_model_len) for s in one_node)
    return spec.strategy == "MultiNode" or (
        spec.strategy == "Auto" and not fits_one_node and gpus.count > gpus.per_node
    )
