"""Multi-node layouts, for a model larger than a node: each replica tensor parallel within a
node and pipeline parallel across nodes."""

from __future__ import annotations

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.autoscaling import target_queue_depth
from llmfleet.planner.candidates import MIN_CONCURRENT_SEQUENCES, concurrency_for
from llmfleet.planner.engine_args import EXTRA_ARGS_FIELD, ArgGroup, parse_int_override
from llmfleet.planner.errors import PlanError
from llmfleet.planner.explain import (
    batching_sentence,
    describe_fit,
    explain_sizing,
    join,
    kv_bound_source,
    plural,
    precision,
)
from llmfleet.planner.kv_cache import KV_BLOCK_TOKENS, layers_per_stage
from llmfleet.planner.lora import explain_lora, lora_plan
from llmfleet.planner.memory import GpuFit, weights_gib
from llmfleet.planner.pipeline_stages import stage_layers
from llmfleet.planner.placement import Gpus
from llmfleet.planner.pod_settings import node_selector, shm_size_gib
from llmfleet.planner.result import Candidate, Plan
from llmfleet.planner.settings import Settings, gpu_fit, vllm_args
from llmfleet.planner.startup import plan_startup


def plan_multinode(  # noqa: PLR0917
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
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
            f"{join(sizes)}",
        )
    if count % tp:
        raise PlanError(
            "spec.gpus.count",
            f"a multi-node layout fills whole nodes: {count} GPUs is not a multiple of "
            f"perNode {tp}; use {join([tp * n for n in range(2, 5)])}",
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
    fits = {pp: gpu_fit(spec, gpus, arch, settings, tp, pipeline=pp) for pp in depths}
    holding = [pp for pp in depths if fits[pp].starts(length)]
    if not holding:
        raise stages_refused(spec, arch, settings, extra, depths[-1], fits[depths[-1]])
    enough = [pp for pp in holding if fits[pp].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    pp = (enough or holding)[0]
    fit = fits[pp]
    replicas = nodes // pp
    seqs = concurrency_for(fit.sequences(settings.workload.tokens), settings.max_num_seqs)
    min_replicas, max_replicas = multinode_bounds(spec, replicas, tp * pp, count)
    total_weights = weights_gib(arch, spec.model.dtype, settings.weights)
    single = max(s for s in sizes if s <= tp)
    reason = " ".join(
        (
            explain_sizing(spec, gpus, arch, settings, fit),
            f"It does not fit one node: at TP={single} each GPU would hold "
            f"{gpu_fit(spec, gpus, arch, settings, single).weights_gib:.2f} GiB of weights.",
            f"So each replica spans {pp} nodes, as vLLM advises for models larger than a node: "
            f"tensor parallel within a node (TP={tp}) and pipeline parallel across nodes "
            f"(PP={pp}, {layers_per_stage(arch, pp)} of {arch.num_layers} layers per stage).",
            f"At TP={tp} x PP={pp}: {describe_fit(fit, length)}.",
            f"The {count} GPUs make {plural(replicas, 'replica')} of {tp * pp} GPUs.",
            "Speed is not predicted for pipeline-parallel layouts.",
            batching_sentence(
                settings, seqs, kv_bound_source(fit.kv_tokens, settings.workload), "replica"
            ),
        )
    )
    lora = lora_plan(arch, settings.lora, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    if lora is not None:
        reason += " " + explain_lora(lora)
    startup = plan_startup(
        spec,
        arch,
        quantized=not settings.weights.sixteen_bit,
        weights_gib=total_weights,
        weights_gib_per_gpu=fit.weights_gib,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
    )
    return Plan(
        strategy="MultiNode",
        replicas=replicas,
        gpus_per_replica=tp * pp,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        weights_gib_per_gpu=fit.weights_gib,
        kv_cache_tokens_per_replica=fit.kv_tokens,
        kv_cache_tokens_compile_cached=fit.kv_tokens_compile_cached,
        max_concurrent_sequences=seqs,
        vllm_args=vllm_args(spec, settings, tp, seqs, extra, pipeline_parallel_size=pp),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=replicas * tp * pp,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=fit.kv_cache_gib,
        reserve_gib_per_gpu=fit.reserve_gib,
        max_model_len=length,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=shm_size_gib(tp),
        startup_budget_seconds=startup.probe_budget_seconds,
        startup=startup,
        node_selector=node_selector(gpus),
        tolerations=gpus.tolerations,
        candidates=tuple(
            Candidate(
                strategy="MultiNode",
                tensor_parallel_size=tp,
                pipeline_parallel_size=depth,
                replicas=nodes // depth,
                kv_cache_tokens_per_replica=fits[depth].kv_tokens,
                max_num_seqs=concurrency_for(
                    fits[depth].sequences(settings.workload.tokens), settings.max_num_seqs
                ),
                chosen=depth == pp,
                verdict=(
                    f"the fewest nodes per replica that hold the model and "
                    f"{plural(fits[depth].sequences(length), 'full-length sequence')}"
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
        target_queue_depth=target_queue_depth(spec, seqs),
        lora=lora,
    )


def multinode_bounds(
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


def stages_refused(  # noqa: PLR0917
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    settings: Settings,
    extra: tuple[ArgGroup, ...],
    depth: int,
    fit: GpuFit,
) -> PlanError:
    """The refusal when even the deepest pipeline fails vLLM's start-up check on one of its
    stages (`pipeline_stages`): its numbers, and the longest maxModelLen that passes, found as
    vLLM's own estimate_max_model_len finds it, by bisection."""
    length, tp = settings.max_model_len, fit.tensor_parallel_size
    low = fit.longest_start(length)
    need = fit.blocks_per_sequence(length)
    layers = stage_layers(arch.num_layers, depth)[fit.stage]
    total = weights_gib(arch, spec.model.dtype, settings.weights)
    options = [f"maxModelLen {low} or less"] if low >= KV_BLOCK_TOKENS else []
    options.append("more nodes (spec.gpus.count)")
    if settings.weights.sixteen_bit:
        options.append("fp8 weights (spec.model.quantization)")
    field = "spec.gpus.count"
    if low >= KV_BLOCK_TOKENS:
        from_args = parse_int_override(extra, "--max-model-len", 16) is not None
        field = EXTRA_ARGS_FIELD if from_args else "spec.engine.maxModelLen"
    return PlanError(
        field,
        f"{spec.model.name} ({total:.1f} GiB of {precision(settings.weights)} weights) does "
        f"not fit "
        f"{plural(depth * tp, 'GPU')} at maxModelLen {length} even over {depth} nodes: at "
        f"TP={tp} x PP={depth} each GPU of pipeline stage {fit.stage + 1} ({layers} of "
        f"{arch.num_layers} layers) holds {fit.weights_gib:.2f} GiB of weights + "
        f"{fit.reserve_gib:.2f} GiB reserve "
        + (f"+ {fit.lora_gib:.2f} GiB of LoRA buffers " if fit.lora_gib else "")
        + f"of the {fit.budget_gib:.2f} GiB vLLM may use, leaving {max(fit.kv_cache_gib, 0):.2f} "
        f"GiB of KV cache: {fit.blocks()} blocks of {KV_BLOCK_TOKENS} tokens. At start-up "
        f"vLLM checks every stage for one {length}-token sequence ({need} blocks) beside the "
        f"block it keeps back, {need + 1} in all, and refuses to start otherwise "
        f"(vllm/v1/core/kv_cache_utils.py). Would fit: {'; '.join(options)}",
    )
