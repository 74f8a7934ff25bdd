"""Single-node layouts: pods of one tensor-parallel size within a node, as many as the GPUs
make, chosen by prediction or by the memory rules."""

from __future__ import annotations

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.autoscaling import autoscaling_bounds, target_queue_depth
from llmfleet.planner.choice import choose, evaluate, to_candidate
from llmfleet.planner.engine_args import ArgGroup
from llmfleet.planner.explain import explain_batching, explain_sizing, explain_smaller_sizes
from llmfleet.planner.lora import explain_lora, lora_plan
from llmfleet.planner.memory import GpuFit, weights_gib
from llmfleet.planner.memory_layout import choose_layout
from llmfleet.planner.placement import Gpus
from llmfleet.planner.pod_settings import node_selector, shm_size_gib
from llmfleet.planner.result import Plan
from llmfleet.planner.settings import Settings, vllm_args
from llmfleet.planner.startup import plan_startup


def plan_single_node(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    extra: tuple[ArgGroup, ...],
    *,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> Plan:
    """`sizes`: the tensor-parallel sizes the model allows within a node; `fits`: the memory
    fit of each."""
    by_memory = choose_layout(spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits)
    candidates = evaluate(spec, gpus, arch, settings, sizes, fits, by_memory)
    chosen, why = choose(spec, candidates, by_memory)
    tp = chosen.tensor_parallel_size
    fit = fits[tp]
    reason = " ".join(
        (
            explain_sizing(spec, gpus, arch, settings, fit),
            explain_smaller_sizes(settings, sizes, fits, tp, settings.weights.sixteen_bit),
            why,
            explain_batching(settings, chosen, spec.slo is not None),
        )
    )
    lora = lora_plan(arch, settings.lora, tensor_parallel_size=tp)
    if lora is not None:
        reason += " " + explain_lora(lora)
    replicas = chosen.replicas
    min_replicas, max_replicas = autoscaling_bounds(spec, replicas)
    total_weights = weights_gib(arch, spec.model.dtype, settings.weights)
    startup = plan_startup(
        spec,
        arch,
        quantized=not settings.weights.sixteen_bit,
        weights_gib=total_weights,
        weights_gib_per_gpu=fit.weights_gib,
        tensor_parallel_size=tp,
    )
    return Plan(
        strategy=chosen.strategy,
        replicas=replicas,
        gpus_per_replica=tp,
        tensor_parallel_size=tp,
        weights_gib_per_gpu=fit.weights_gib,
        kv_cache_tokens_per_replica=fit.kv_tokens,
        kv_cache_tokens_compile_cached=fit.kv_tokens_compile_cached,
        max_concurrent_sequences=chosen.max_num_seqs,
        vllm_args=vllm_args(spec, settings, tp, chosen.max_num_seqs, extra),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=replicas * tp,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=fit.kv_cache_gib,
        reserve_gib_per_gpu=fit.reserve_gib,
        max_model_len=settings.max_model_len,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=shm_size_gib(tp),
        startup_budget_seconds=startup.probe_budget_seconds,
        startup=startup,
        node_selector=node_selector(gpus),
        tolerations=gpus.tolerations,
        predicted=chosen.prediction,
        candidates=tuple(to_candidate(spec, c, chosen, why) for c in candidates),
        target_queue_depth=target_queue_depth(spec, chosen.max_num_seqs),
        lora=lora,
    )
