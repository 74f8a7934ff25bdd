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
* Derived vLLM settings: maxModelLen = min(8192, maxPositionEmbeddings); maxNumBatchedTokens =
  vLLM's own defaults by GPU size (16384 from 70 GiB, else 8192; Latency smaller), at least
  maxNumSeqs -- vLLM always prefills in chunks, so it may be below maxModelLen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmfleet.models.catalog import CATALOG_NAMES, resolve_architecture
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.models.profiles import DEFAULT_GPU_PROFILES, GpuProfiles
from llmfleet.models.status import PlannedStrategy
from llmfleet.models.workload import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS
from llmfleet.planner.candidates import (
    MAX_NUM_SEQS_CAP,
    MIN_CONCURRENT_SEQUENCES,
    Evaluated,
    Workload,
    choose_by_prediction,
    concurrency_for,
    meets,
    predict,
    why_lost,
)
from llmfleet.planner.engine_args import (
    EXTRA_ARGS_FIELD,
    ArgGroup,
    group_args,
    merge_args,
    parse_fraction_override,
    parse_int_override,
)
from llmfleet.planner.errors import PlanError
from llmfleet.planner.memory import (
    GIB,
    GpuFit,
    batched_tokens_within,
    fit_on_gpu,
    kv_bytes_per_token_per_gpu,
    kv_tokens_in,
    layers_per_stage,
    memory_for_budget,
    usable_gib,
    weights_gib,
)
from llmfleet.planner.parallelism import counts_that_split, splits_evenly, tensor_parallel_sizes
from llmfleet.planner.performance import pod_model
from llmfleet.planner.placement import Gpus, resolve_gpus
from llmfleet.planner.result import Candidate, Plan

DEFAULT_MAX_MODEL_LEN = 8192
KNOWN_PRODUCTS = tuple(
    sorted(f"{p.product} ({n})" for n, p in DEFAULT_GPU_PROFILES.items() if p.has_performance)
)
# Prefill chunk per engine step, by vLLM's own rule for its defaults: 16384 on GPUs of 70 GiB and
# more, 8192 on smaller ones and CPUs. Latency takes a smaller chunk so a prompt arriving
# mid-stream delays running sequences' next token less.
LARGE_GPU_GIB = 70
LARGE_GPU_BATCHED_TOKENS = {"Throughput": 16384, "Latency": 8192}
SMALL_BATCHED_TOKENS = {"Throughput": 8192, "Latency": 2048}
# HPA target: a request that queues behind this many others waits about a quarter of one
# request's service time, as every finishing sequence admits one waiting request.
QUEUE_DEPTH_PER_CONCURRENT_SEQUENCE = 0.25
# NCCL and vLLM's custom all-reduce exchange through /dev/shm; 15 GiB at TP=8 matches what
# vLLM's multi-GPU deployment examples use.
SHM_BASE_GIB = 1
SHM_GIB_PER_EXTRA_GPU = 2
# Download (about 100 MiB/s), load and CUDA-graph capture: a floor plus time per weight GiB.
STARTUP_BASE_SECONDS = 300
STARTUP_SECONDS_PER_WEIGHT_GIB = 10
# CPU-only pods: Python, the tokenizer and activations beside the weights and the KV cache.
CPU_RUNTIME_GIB = 2
# Set by NVIDIA GPU feature discovery on every GPU node.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class _Settings:
    """Engine settings after defaults and extraArgs overrides; the planner sizes with these."""

    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int | None
    max_num_batched_tokens: int
    workload: Workload


@dataclass(frozen=True)
class _Layout:
    strategy: PlannedStrategy
    tensor_parallel_size: int
    why: str


def plan(spec: LLMDeploymentSpec, profiles: GpuProfiles = DEFAULT_GPU_PROFILES) -> Plan:
    """Plan `spec` (its `gpus.profile` looked up in `profiles`), or raise PlanError naming the
    field to change."""
    arch = _architecture(spec)
    extra = group_args(spec.engine.extra_args)
    if spec.gpus is None:
        return _plan_cpu(spec, arch, _settings(spec, arch, extra, SMALL_BATCHED_TOKENS), extra)
    gpus = resolve_gpus(spec.gpus, profiles)
    chunks = LARGE_GPU_BATCHED_TOKENS if gpus.memory_gib >= LARGE_GPU_GIB else SMALL_BATCHED_TOKENS
    return _plan_gpus(spec, gpus, arch, _settings(spec, arch, extra, chunks), extra)


def _architecture(spec: LLMDeploymentSpec) -> ModelArchitecture:
    arch = resolve_architecture(spec.model)
    if arch is None:
        raise PlanError(
            "spec.model.architecture",
            f"{spec.model.name} is not in the built-in catalog, so set its architecture "
            "(parametersBillions, numLayers, numAttentionHeads, numKeyValueHeads, headDim, "
            "maxPositionEmbeddings from the model's config.json). Catalog models: "
            + ", ".join(CATALOG_NAMES),
        )
    return arch


def _settings(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    extra: tuple[ArgGroup, ...],
    chunks: dict[str, int],
) -> _Settings:
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
    return _Settings(
        max_model_len=max_model_len,
        gpu_memory_utilization=utilization or engine.gpu_memory_utilization,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        workload=workload,
    )


def _precision(spec: LLMDeploymentSpec) -> str:
    quantization = spec.model.quantization
    if quantization == "none":
        return "16-bit" if spec.model.dtype == "auto" else spec.model.dtype
    return {"fp8": "fp8", "int8": "int8", "awq": "4-bit AWQ", "gptq": "4-bit GPTQ"}[quantization]


def _fit(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    tensor_parallel_size: int,
    *,
    fp8: bool = False,
    pipeline: int = 1,
) -> GpuFit:
    return fit_on_gpu(
        arch,
        dtype=spec.model.dtype,
        quantization="fp8" if fp8 else spec.model.quantization,
        memory_gib=gpus.memory_gib,
        gpu_memory_utilization=settings.gpu_memory_utilization,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline,
    )


def _plan_gpus(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    extra: tuple[ArgGroup, ...],
) -> Plan:
    sizes = tensor_parallel_sizes(arch, gpus.per_node)
    fits = {size: _fit(spec, gpus, arch, settings, size) for size in sizes}
    one_node = [s for s in sizes if s <= min(gpus.count, gpus.per_node)]
    fits_one_node = any(fits[s].sequences(settings.max_model_len) >= 1 for s in one_node)
    if spec.strategy == "MultiNode" or (
        spec.strategy == "Auto" and not fits_one_node and gpus.count > gpus.per_node
    ):
        return _plan_multinode(spec, gpus, arch, settings, extra, sizes)
    by_memory = _choose_layout(
        spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits
    )
    candidates = _evaluate(spec, gpus, arch, settings, sizes, fits, by_memory)
    chosen, why = _choose(spec, candidates, by_memory)
    tp = chosen.tensor_parallel_size
    fit = fits[tp]
    reason = " ".join(
        (
            _explain_sizing(spec, gpus, arch, settings, fit),
            _explain_smaller_sizes(settings, sizes, fits, tp, spec.model.quantization),
            why,
            _explain_batching(settings, chosen, spec.slo is not None),
        )
    )
    replicas = chosen.replicas
    min_replicas, max_replicas = _autoscaling_bounds(spec, replicas)
    total_weights = weights_gib(arch, spec.model.dtype, spec.model.quantization)
    return Plan(
        strategy=chosen.strategy,
        replicas=replicas,
        gpus_per_replica=tp,
        tensor_parallel_size=tp,
        weights_gib_per_gpu=fit.weights_gib,
        kv_cache_tokens_per_replica=fit.kv_tokens,
        max_concurrent_sequences=chosen.max_num_seqs,
        vllm_args=_vllm_args(spec, settings, tp, chosen.max_num_seqs, extra),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=replicas * tp,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=fit.kv_cache_gib,
        reserve_gib_per_gpu=fit.reserve_gib,
        max_model_len=settings.max_model_len,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=SHM_BASE_GIB + SHM_GIB_PER_EXTRA_GPU * (tp - 1),
        startup_budget_seconds=_startup_budget(total_weights),
        node_selector=_node_selector(gpus),
        tolerations=gpus.tolerations,
        predicted=chosen.prediction,
        candidates=tuple(_candidate(spec, c, chosen, why) for c in candidates),
        target_queue_depth=_target_queue_depth(spec, chosen.max_num_seqs),
    )


def _plan_multinode(  # noqa: PLR0917
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    extra: tuple[ArgGroup, ...],
    sizes: tuple[int, ...],
) -> Plan:
    """vLLM's guidance for a model larger than a node: tensor parallel within a node, pipeline
    parallel across nodes. TP = the GPUs of a node; PP = the fewest nodes whose GPUs hold the
    weights and the KV cache (at least MIN_CONCURRENT_SEQUENCES full-length sequences when some
    depth does); replicas = what the nodes make of that."""
    tp, length, count = gpus.per_node, settings.max_model_len, gpus.count
    if tp not in sizes:
        raise PlanError(
            "spec.gpus.perNode",
            f"a multi-node replica runs tensor parallel over a whole node, and {tp} GPUs "
            f"(perNode) do not divide {spec.model.name}'s {arch.num_attention_heads} attention "
            f"heads and {arch.num_key_value_heads} KV heads into powers of two: one of "
            f"{_join(sizes)}",
        )
    if count % tp:
        raise PlanError(
            "spec.gpus.count",
            f"a multi-node layout fills whole nodes: {count} GPUs is not a multiple of "
            f"perNode {tp}; use {_join([tp * n for n in range(2, 5)])}",
        )
    nodes = count // tp
    if nodes < 2:
        raise PlanError(
            "spec.strategy",
            f"strategy MultiNode spans nodes, but {count} GPUs make one node of {tp}; give "
            f"spec.gpus.count {2 * tp} or more, or use strategy Auto",
        )
    depths = [pp for pp in range(2, nodes + 1) if nodes % pp == 0]
    if depths[0] > arch.num_layers:
        raise PlanError(
            "spec.gpus.count",
            f"{spec.model.name} has {arch.num_layers} layers, fewer than the {depths[0]} "
            "pipeline stages these nodes would make; use fewer GPUs",
        )
    depths = [pp for pp in depths if pp <= arch.num_layers]
    fits = {pp: _fit(spec, gpus, arch, settings, tp, pipeline=pp) for pp in depths}
    holding = [pp for pp in depths if fits[pp].sequences(length) >= 1]
    if not holding:
        deepest = fits[depths[-1]]
        total = weights_gib(arch, spec.model.dtype, spec.model.quantization)
        raise PlanError(
            "spec.gpus.count",
            f"{spec.model.name} ({total:.1f} GiB of {_precision(spec)} weights) does not fit "
            f"{count} GPUs even over "
            f"{depths[-1]} nodes: at TP={tp} x PP={depths[-1]} each GPU needs "
            f"{deepest.weights_gib:.2f} GiB of weights + {deepest.reserve_gib:.2f} GiB reserve "
            f"and one {length}-token sequence, but vLLM may use {deepest.budget_gib:.2f} GiB; "
            "add nodes (spec.gpus.count)"
            + (", use fp8 (spec.model.quantization)" if spec.model.quantization == "none" else "")
            + " or a shorter spec.engine.maxModelLen",
        )
    enough = [pp for pp in holding if fits[pp].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    pp = (enough or holding)[0]
    fit = fits[pp]
    replicas = nodes // pp
    seqs = concurrency_for(fit.kv_tokens, settings.workload, settings.max_num_seqs)
    min_replicas, max_replicas = _multinode_bounds(spec, replicas, tp * pp, count)
    total_weights = weights_gib(arch, spec.model.dtype, spec.model.quantization)
    single = max(s for s in sizes if s <= tp)
    reason = " ".join(
        (
            _explain_sizing(spec, gpus, arch, settings, fit),
            f"It does not fit one node: at TP={single} each GPU would hold "
            f"{_fit(spec, gpus, arch, settings, single).weights_gib:.2f} GiB of weights.",
            f"So each replica spans {pp} nodes, as vLLM advises for models larger than a node: "
            f"tensor parallel within a node (TP={tp}) and pipeline parallel across nodes "
            f"(PP={pp}, {layers_per_stage(arch, pp)} of {arch.num_layers} layers per stage).",
            f"At TP={tp} x PP={pp}: {_describe_fit(fit, length)}.",
            f"The {count} GPUs make {_plural(replicas, 'replica')} of {tp * pp} GPUs.",
            "Speed is not predicted for pipeline-parallel layouts.",
            _batching_sentence(
                settings, seqs, _kv_bound_source(fit.kv_tokens, settings.workload), "replica"
            ),
        )
    )
    return Plan(
        strategy="MultiNode",
        replicas=replicas,
        gpus_per_replica=tp * pp,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        weights_gib_per_gpu=fit.weights_gib,
        kv_cache_tokens_per_replica=fit.kv_tokens,
        max_concurrent_sequences=seqs,
        vllm_args=_vllm_args(spec, settings, tp, seqs, extra, pipeline_parallel_size=pp),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=replicas * tp * pp,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=fit.kv_cache_gib,
        reserve_gib_per_gpu=fit.reserve_gib,
        max_model_len=length,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=SHM_BASE_GIB + SHM_GIB_PER_EXTRA_GPU * (tp - 1),
        startup_budget_seconds=_startup_budget(total_weights),
        node_selector=_node_selector(gpus),
        tolerations=gpus.tolerations,
        candidates=tuple(
            Candidate(
                strategy="MultiNode",
                tensor_parallel_size=tp,
                pipeline_parallel_size=depth,
                replicas=nodes // depth,
                kv_cache_tokens_per_replica=fits[depth].kv_tokens,
                max_num_seqs=concurrency_for(
                    fits[depth].kv_tokens, settings.workload, settings.max_num_seqs
                ),
                chosen=depth == pp,
                verdict=(
                    f"the fewest nodes per replica that hold the model and "
                    f"{_plural(fits[depth].sequences(length), 'full-length sequence')}"
                    if depth == pp
                    else f"PP={depth} holds {fits[depth].sequences(length)} full-length "
                    f"sequences, PP={pp} is shallower"
                    if depth > pp
                    else f"PP={depth} holds {fits[depth].sequences(length)} full-length "
                    f"sequences, too few"
                ),
            )
            for depth in depths
        ),
        target_queue_depth=_target_queue_depth(spec, seqs),
    )


def _multinode_bounds(
    spec: LLMDeploymentSpec, replicas: int, gpus_per_replica: int, count: int
) -> tuple[int, int]:
    """A multi-node replica takes whole nodes: the autoscaler may not reach past spec.gpus."""
    autoscaling = spec.autoscaling
    if not autoscaling.enabled:
        return replicas, replicas
    minimum = replicas if autoscaling.min_replicas is None else autoscaling.min_replicas
    maximum = autoscaling.max_replicas or replicas
    most = count // gpus_per_replica
    if maximum > most:
        raise PlanError(
            "spec.autoscaling.maxReplicas",
            f"{maximum} replicas of {gpus_per_replica} GPUs need {maximum * gpus_per_replica} "
            f"GPUs, more than spec.gpus.count {count}; a multi-node replica takes whole nodes, "
            f"so set maxReplicas to at most {most} or give more GPUs",
        )
    if maximum < minimum:
        raise PlanError(
            "spec.autoscaling.maxReplicas",
            f"{maximum} is below minReplicas {minimum}; set maxReplicas to at least that",
        )
    return minimum, maximum


def _candidate(spec: LLMDeploymentSpec, c: Evaluated, chosen: Evaluated, why: str) -> Candidate:
    return Candidate(
        strategy=c.strategy,
        tensor_parallel_size=c.tensor_parallel_size,
        replicas=c.replicas,
        kv_cache_tokens_per_replica=c.fit.kv_tokens,
        max_num_seqs=c.max_num_seqs,
        predicted=c.prediction,
        chosen=c is chosen,
        verdict=why if c is chosen else why_lost(c, chosen, spec.objective, spec.slo),
    )


def _allowed_sizes(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
    length: int,
) -> list[int]:
    """Sizes the strategy permits that hold at least one full-length sequence."""
    count = gpus.count
    allowed = []
    for size in sizes:
        if size > count or fits[size].sequences(length) < 1:
            continue
        if not splits_evenly(count, size, gpus.per_node):
            continue
        pods = count // size
        if spec.strategy == "SinglePod" and size != count:
            continue
        if spec.strategy == "MultiPod" and pods < 2:
            continue
        allowed.append(size)
    return allowed


def _evaluate(  # noqa: PLR0917
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
    by_memory: _Layout,
) -> list[Evaluated]:
    if gpus.performance is None:
        # Memory rules alone: the only candidate is the one they choose.
        allowed = [by_memory.tensor_parallel_size]
    else:
        allowed = _allowed_sizes(spec, gpus, sizes, fits, settings.max_model_len)
    out = []
    for size in allowed:
        fit = fits[size]
        seqs = concurrency_for(fit.kv_tokens, settings.workload, settings.max_num_seqs)
        prediction = None
        if gpus.performance is not None:
            pod = pod_model(
                arch,
                dtype=spec.model.dtype,
                quantization=spec.model.quantization,
                tensor_parallel_size=size,
                gpu=gpus.performance,
                max_num_batched_tokens=settings.max_num_batched_tokens,
            )
            prediction = predict(pod, seqs, settings.workload, spec.slo)
            within = prediction.max_concurrency_within_slo
            if within and settings.max_num_seqs is None and within < seqs:
                # The SLO caps concurrency: more sequences would stretch every token past it.
                seqs = within
                prediction = predict(pod, seqs, settings.workload, spec.slo)
        full = fit.sequences(settings.max_model_len)
        out.append(Evaluated(size, gpus.count // size, fit, seqs, prediction, full))
    return out


def _choose(
    spec: LLMDeploymentSpec, candidates: list[Evaluated], by_memory: _Layout
) -> tuple[Evaluated, str]:
    predicted = [c for c in candidates if c.prediction is not None]
    if not predicted:
        gpus = spec.gpus
        what = (
            f"GPU profile {gpus.profile!r}"
            if gpus and gpus.profile
            else f"GPU product {gpus.product!r}"
            if gpus and gpus.product
            else "a GPU given by memoryGiB alone"
        )
        known = "; known: " + ", ".join(KNOWN_PRODUCTS)
        if spec.slo is not None:
            raise PlanError(
                "spec.gpus.profile" if gpus and gpus.profile else "spec.gpus.product",
                f"spec.slo needs the planner's speed predictions, and {what} has no "
                "performance constants (hbmGBps, bf16TFLOPS, interconnectGBps in the Helm value "
                "gpuProfiles); name a GPU the operator has figures for" + known,
            )
        chosen = next(
            c for c in candidates if c.tensor_parallel_size == by_memory.tensor_parallel_size
        )
        return chosen, (
            f"{by_memory.why} Speed is not predicted: {what} has no performance constants "
            "(add hbmGBps, bf16TFLOPS and interconnectGBps to its gpuProfiles entry)."
        )
    if spec.slo is not None and not any(meets(c, spec.slo) for c in predicted):
        raise _slo_unmet(spec, predicted)
    return choose_by_prediction(predicted, spec.objective, spec.slo)


def _slo_unmet(spec: LLMDeploymentSpec, candidates: list[Evaluated]) -> PlanError:
    slo = spec.slo
    assert slo is not None
    predictions = [(c, c.prediction) for c in candidates if c.prediction is not None]
    first_c, first = min(predictions, key=lambda cp: cp[1].ttft_millis)
    token_c, token = min(predictions, key=lambda cp: cp[1].itl_millis_batch1)
    wanted = []
    if slo.ttft_millis is not None:
        wanted.append(f"ttftMillis {slo.ttft_millis}")
    if slo.itl_millis is not None:
        wanted.append(f"itlMillis {slo.itl_millis}")
    gpus = spec.gpus.count if spec.gpus else 0
    return PlanError(
        "spec.slo",
        f"no layout of {gpus} GPUs meets {' and '.join(wanted)} for {spec.model.name} with "
        f"{first.prompt_tokens}-token prompts: the best predicted TTFT is "
        f"{first.ttft_millis:.0f} ms (TP={first_c.tensor_parallel_size}) and the best ITL "
        f"{token.itl_millis_batch1:.1f} ms for a lone request "
        f"(TP={token_c.tensor_parallel_size}); relax spec.slo, use fp8 "
        "(spec.model.quantization), more GPUs or faster ones",
    )


def _target_queue_depth(spec: LLMDeploymentSpec, max_num_seqs: int) -> int:
    given = spec.autoscaling.target_queue_depth
    if given is not None:
        return given
    return max(1, math.ceil(max_num_seqs * QUEUE_DEPTH_PER_CONCURRENT_SEQUENCE))


def _choose_layout(
    spec: LLMDeploymentSpec,
    *,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> _Layout:
    count = gpus.count
    length = settings.max_model_len
    if spec.strategy == "SinglePod":
        if count > gpus.per_node:
            raise PlanError(
                "spec.gpus.count",
                f"strategy SinglePod puts all {count} GPUs in one pod, but a node has "
                f"{gpus.per_node} (spec.gpus.perNode) and tensor parallelism does not span "
                f"nodes; use at most {gpus.per_node} GPUs or strategy MultiPod or Auto",
            )
        if count not in sizes:
            raise PlanError(
                "spec.gpus.count",
                f"strategy SinglePod uses tensor-parallel size = gpus.count, which must be a "
                f"power of two up to {gpus.per_node} that divides {spec.model.name}'s "
                f"{arch.num_attention_heads} attention heads and {arch.num_key_value_heads} "
                f"KV heads: one of {_join(sizes)}",
            )
        if fits[count].sequences(length) < 1:
            raise _does_not_fit(
                spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits
            )
        return _Layout(
            "SinglePod",
            count,
            f"strategy SinglePod: one pod with all {count} GPUs (TP={count}).",
        )

    within = [size for size in sizes if size <= count]
    acceptable = [size for size in within if fits[size].sequences(length) >= 1]
    if not acceptable:
        raise _does_not_fit(spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits)
    preferred = [s for s in acceptable if fits[s].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    smallest = (preferred or acceptable)[0]

    if spec.strategy == "Auto" and spec.objective == "Latency":
        even = [size for size in acceptable if splits_evenly(count, size, gpus.per_node)]
        if not even:
            raise _uneven_count(spec, gpus, smallest)
        widest = even[-1]
        pods = count // widest
        layout = "one pod" if pods == 1 else f"{pods} pods of {widest} GPUs"
        return _Layout(
            "SinglePod" if pods == 1 else "MultiPod",
            widest,
            f"Objective Latency takes the widest tensor parallelism the {count} GPUs allow "
            f"within a node, TP={widest}, to spread each token's work over more GPUs: "
            f"{layout}.",
        )

    if not splits_evenly(count, smallest, gpus.per_node):
        raise _uneven_count(spec, gpus, smallest)
    pods = count // smallest
    if spec.strategy == "MultiPod":
        if pods < 2:
            raise PlanError(
                "spec.strategy",
                f"strategy MultiPod needs at least two pods, but {spec.model.name} needs "
                f"tensor-parallel size {smallest}, so {count} GPUs make one pod; use strategy "
                "SinglePod or Auto, or spec.gpus.count of "
                + _join(counts_that_split(smallest, gpus.per_node)[1:]),
            )
        return _Layout(
            "MultiPod",
            smallest,
            f"strategy MultiPod: {pods} pods of the smallest fitting size, TP={smallest}.",
        )
    if pods == 1:
        return _Layout(
            "SinglePod", smallest, f"TP={smallest} takes all {count} GPUs, so they form one pod."
        )
    return _Layout(
        "MultiPod",
        smallest,
        f"Objective Throughput prefers independent replicas to wider tensor parallelism "
        f"(no cross-GPU all-reduce per layer, each pod batches on its own), so the {count} "
        f"GPUs run as {pods} pods of TP={smallest} rather than one wider pod.",
    )


def _uneven_count(spec: LLMDeploymentSpec, gpus: Gpus, size: int) -> PlanError:
    nodes = "" if gpus.count <= gpus.per_node else f" filling nodes of {gpus.per_node} GPUs"
    return PlanError(
        "spec.gpus.count",
        f"{gpus.count} GPUs do not split into pods of {size} GPUs{nodes}; {size} is the "
        f"smallest tensor-parallel size that fits {spec.model.name}. GPU counts that work: "
        f"{_join(counts_that_split(size, gpus.per_node))}",
    )


def _does_not_fit(
    spec: LLMDeploymentSpec,
    *,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> PlanError:
    length = settings.max_model_len
    widest = max(size for size in sizes if size <= gpus.count)
    fit = fits[widest]
    one_sequence = kv_bytes_per_token_per_gpu(arch, spec.model.dtype, widest) * length / GIB
    needed = fit.weights_gib + fit.reserve_gib + one_sequence
    model = (
        f"{spec.model.name} ({weights_gib(arch, spec.model.dtype, spec.model.quantization):.1f} "
        f"GiB of {_precision(spec)} weights)"
    )
    numbers = (
        f"at tensor-parallel size {widest} each GPU needs {fit.weights_gib:.2f} GiB of weights "
        f"+ {fit.reserve_gib:.2f} GiB runtime reserve + {one_sequence:.2f} GiB of KV cache for "
        f"one {length}-token sequence = {needed:.2f} GiB, but vLLM may use {fit.budget_gib:.2f} "
        f"GiB ({usable_gib(gpus.memory_gib):.2f} GiB that CUDA reports of "
        f"{gpus.memory_gib:g} GiB x gpuMemoryUtilization "
        f"{settings.gpu_memory_utilization:g})"
    )
    options: list[str] = []
    wider = [s for s in sizes if s > widest and fits[s].sequences(length) >= 1]
    if wider:
        options.append(f"spec.gpus.count {wider[0]} (tensor-parallel size {wider[0]})")
    if spec.model.quantization == "none":
        fp8 = _fit(spec, gpus, arch, settings, widest, fp8=True)
        if fp8.sequences(length) >= 1:
            options.append(
                f"spec.model.quantization fp8 ({fp8.weights_gib:.2f} GiB of weights per GPU, "
                f"{_plural(fp8.sequences(length), 'full-length sequence')} of KV cache at "
                f"TP={widest})"
            )
    if fit.kv_tokens >= 16:
        # Only where some KV cache is left: with none, a shorter context frees nothing (the
        # activation reserve follows maxNumBatchedTokens, not maxModelLen).
        options.append(f"spec.engine.maxModelLen {fit.kv_tokens} or less")
    batched = batched_tokens_within(arch, fit.budget_gib - fit.weights_gib - one_sequence)
    if settings.max_num_seqs is not None:
        batched = batched if batched >= settings.max_num_seqs else 0
    if 0 < batched < settings.max_num_batched_tokens:
        batched = batched // 256 * 256 or batched
        options.append(
            f"spec.engine.maxNumBatchedTokens {batched} or less ("
            f"{settings.max_num_batched_tokens} now: vLLM keeps room for the activations of "
            "that many tokens)"
        )
    needed_memory = math.ceil(memory_for_budget(needed, settings.gpu_memory_utilization))
    options.append(f"GPUs with at least {needed_memory} GiB (spec.gpus.memoryGiB)")
    if wider:
        field, where = "spec.gpus.count", f"on {_plural(gpus.count, 'GPU')}"
    else:
        field, where = "spec.gpus", f"on one node of {gpus.per_node} GPUs"
    return PlanError(
        field, f"{model} does not fit {where}: {numbers}. Would fit: {'; '.join(options)}"
    )


def _explain_sizing(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: _Settings,
    chosen: GpuFit,
) -> str:
    total = weights_gib(arch, spec.model.dtype, spec.model.quantization)
    kv_kib = kv_bytes_per_token_per_gpu(arch, spec.model.dtype, 1) / 1024
    return (
        f"{spec.model.name} has {total:.1f} GiB of {_precision(spec)} weights "
        f"({arch.parameters_billions:g}B parameters) and {kv_kib:g} KiB of KV cache per token. "
        f"Each {gpus.memory_gib:g} GiB GPU gives vLLM {chosen.budget_gib:.2f} GiB "
        f"(gpuMemoryUtilization {settings.gpu_memory_utilization:g}), {chosen.reserve_gib:.2f} "
        f"GiB of it kept for activations and the runtime."
    )


def _describe_fit(fit: GpuFit, length: int) -> str:
    return (
        f"{fit.weights_gib:.2f} GiB of weights and {fit.kv_cache_gib:.2f} GiB of KV cache "
        f"({fit.kv_tokens:,} tokens, {fit.sequences(length)} sequences of {length:,} tokens) "
        f"per GPU"
    )


def _explain_smaller_sizes(
    settings: _Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
    chosen: int,
    quantization: str = "none",
) -> str:
    length = settings.max_model_len
    text = f"At TP={chosen}: {_describe_fit(fits[chosen], length)}."
    sequences = fits[chosen].sequences(length)
    if sequences < MIN_CONCURRENT_SEQUENCES:
        text += (
            f" Only {_plural(sequences, 'full-length sequence')} fit, below the "
            f"{MIN_CONCURRENT_SEQUENCES} the planner aims for; expect queueing, or use "
            f"{'fp8, ' if quantization == 'none' else ''}more GPUs or a shorter maxModelLen."
        )
    smaller = [size for size in sizes if size < chosen]
    if not smaller:
        return text
    enough = [s for s in smaller if fits[s].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    if enough:
        fit = fits[enough[0]]
        return (
            f"TP={fit.tensor_parallel_size} would already fit "
            f"{_plural(fit.sequences(length), 'sequence')} of {length:,} tokens. {text}"
        )
    below = fits[smaller[-1]]
    if below.kv_tokens == 0:
        shortfall = f"{below.weights_gib:.2f} GiB of weights per GPU leave no room for KV cache"
    else:
        shortfall = (
            f"{below.kv_cache_gib:.2f} GiB of KV cache per GPU holds {below.kv_tokens:,} "
            f"tokens, {_plural(below.sequences(length), 'sequence')} of {length:,} tokens, "
            f"fewer than the {MIN_CONCURRENT_SEQUENCES} wanted"
        )
    return f"At TP={below.tensor_parallel_size}, {shortfall}. {text}"


def _explain_batching(settings: _Settings, chosen: Evaluated, by_slo: bool) -> str:
    workload = settings.workload
    if settings.max_num_seqs is not None:
        source = "as set"
    elif by_slo and chosen.prediction and chosen.prediction.max_concurrency_within_slo:
        source = "the most whose predicted ITL meets spec.slo"
    else:
        source = _kv_bound_source(chosen.fit.kv_tokens, workload)
    return _batching_sentence(settings, chosen.max_num_seqs, source)


def _batching_sentence(
    settings: _Settings, max_num_seqs: int, source: str, unit: str = "pod"
) -> str:
    return (
        f"Each {unit} runs up to {max_num_seqs} sequences at once ({source}) and batches up to "
        f"{settings.max_num_batched_tokens:,} tokens per step."
    )


def _kv_bound_source(kv_tokens: int, workload: Workload) -> str:
    return (
        f"what {kv_tokens:,} KV tokens hold of {workload.prompt_tokens}+"
        f"{workload.output_tokens}-token requests, at most {MAX_NUM_SEQS_CAP}; vLLM preempts "
        "beyond that, so fewer would only throttle it"
    )


def _explain_cpu_batching(settings: _Settings, max_num_seqs: int, kv_tokens: int) -> str:
    source = (
        "as set"
        if settings.max_num_seqs is not None
        else _kv_bound_source(kv_tokens, settings.workload)
    )
    return _batching_sentence(settings, max_num_seqs, source)


def _autoscaling_bounds(spec: LLMDeploymentSpec, replicas: int) -> tuple[int, int]:
    autoscaling = spec.autoscaling
    if not autoscaling.enabled:
        return replicas, replicas
    minimum = replicas if autoscaling.min_replicas is None else autoscaling.min_replicas
    maximum = autoscaling.max_replicas or 2 * (minimum or replicas)
    if maximum < minimum:
        raise PlanError(
            "spec.autoscaling.maxReplicas",
            f"{maximum} is below minReplicas {minimum} (the planned replica count when "
            "minReplicas is unset); set maxReplicas to at least that",
        )
    return minimum, maximum


def _startup_budget(total_weights_gib: float) -> int:
    return STARTUP_BASE_SECONDS + math.ceil(total_weights_gib * STARTUP_SECONDS_PER_WEIGHT_GIB)


def _vllm_args(
    spec: LLMDeploymentSpec,
    settings: _Settings,
    tensor_parallel_size: int,
    max_num_seqs: int,
    extra: tuple[ArgGroup, ...],
    *,
    pipeline_parallel_size: int = 1,
) -> tuple[str, ...]:
    model = spec.model
    derived: list[tuple[str, tuple[str, ...]]] = [("--model", (model.name,))]
    if model.served_model_name is not None:
        derived.append(("--served-model-name", (model.served_model_name,)))
    derived.append(("--dtype", (model.dtype,)))
    # Only fp8 is passed: it quantizes a 16-bit checkpoint on load. vLLM detects int8, AWQ and
    # GPTQ from the checkpoint's config, and naming awq/gptq explicitly would force their slow
    # non-Marlin kernels (int8 is not a vLLM method name at all).
    if model.quantization == "fp8":
        derived.append(("--quantization", ("fp8",)))
    derived.append(("--tensor-parallel-size", (str(tensor_parallel_size),)))
    if pipeline_parallel_size > 1:
        derived.append(("--pipeline-parallel-size", (str(pipeline_parallel_size),)))
    derived.append(("--max-model-len", (str(settings.max_model_len),)))
    if spec.gpus is not None:
        derived.append(("--gpu-memory-utilization", (f"{settings.gpu_memory_utilization:g}",)))
    derived.append(("--max-num-seqs", (str(max_num_seqs),)))
    derived.append(("--max-num-batched-tokens", (str(settings.max_num_batched_tokens),)))
    derived.append(("--scheduling-policy", (spec.engine.scheduling_policy,)))
    return merge_args(derived, extra)


def _plan_cpu(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    settings: _Settings,
    extra: tuple[ArgGroup, ...],
) -> Plan:
    length = settings.max_model_len
    cache_gib = spec.engine.cpu_kv_cache_gib
    bytes_per_token = kv_bytes_per_token_per_gpu(arch, spec.model.dtype, 1)
    tokens = kv_tokens_in(cache_gib, bytes_per_token)
    if tokens < length:
        needed = math.ceil(bytes_per_token * length / GIB * 100) / 100
        raise PlanError(
            "spec.engine.cpuKVCacheGiB",
            f"{cache_gib:g} GiB of KV cache holds {tokens:,} tokens of {spec.model.name}, less "
            f"than one {length}-token sequence (maxModelLen); set cpuKVCacheGiB to at least "
            f"{needed:g} or lower spec.engine.maxModelLen to {max(16, tokens)} or less",
        )
    total_weights = weights_gib(arch, spec.model.dtype, spec.model.quantization)
    memory = math.ceil(total_weights + cache_gib + CPU_RUNTIME_GIB)
    max_num_seqs = concurrency_for(tokens, settings.workload, settings.max_num_seqs)
    sequences = tokens // length
    reason = (
        f"No spec.gpus, so one vLLM CPU pod. {spec.model.name} has {total_weights:.1f} GiB of "
        f"{_precision(spec)} weights ({arch.parameters_billions:g}B parameters) in host "
        f"memory; the {cache_gib:g} GiB KV cache (engine.cpuKVCacheGiB) holds {tokens:,} "
        f"tokens, {_plural(sequences, 'sequence')} of {length:,} tokens. "
        f"Suggested memory request: {memory} GiB (weights + KV cache + {CPU_RUNTIME_GIB} GiB "
        f"runtime). {_explain_cpu_batching(settings, max_num_seqs, tokens)}"
    )
    min_replicas, max_replicas = _autoscaling_bounds(spec, 1)
    return Plan(
        strategy="SinglePod",
        replicas=1,
        gpus_per_replica=0,
        tensor_parallel_size=1,
        weights_gib_per_gpu=0.0,
        kv_cache_tokens_per_replica=tokens,
        max_concurrent_sequences=max_num_seqs,
        vllm_args=_vllm_args(spec, settings, 1, max_num_seqs, extra),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=0,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=0.0,
        reserve_gib_per_gpu=0.0,
        max_model_len=length,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=SHM_BASE_GIB,
        startup_budget_seconds=_startup_budget(total_weights),
        cpu_memory_gib=memory,
        target_queue_depth=_target_queue_depth(spec, max_num_seqs),
    )


def _join(numbers: list[int] | tuple[int, ...]) -> str:
    return ", ".join(str(number) for number in numbers)


def _plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _node_selector(gpus: Gpus) -> dict[str, str]:
    selector = dict(gpus.node_selector)
    if gpus.product:
        selector[GPU_PRODUCT_LABEL] = gpus.product
    return dict(sorted(selector.items()))
