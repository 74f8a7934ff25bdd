"""The CPU path: one vLLM CPU pod when spec.gpus is unset, its KV cache set by
spec.engine.cpuKVCacheGiB."""

from __future__ import annotations

import math

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.autoscaling import autoscaling_bounds, target_queue_depth
from llmfleet.planner.candidates import concurrency_for
from llmfleet.planner.engine_args import ArgGroup
from llmfleet.planner.errors import PlanError
from llmfleet.planner.explain import explain_cpu_batching, plural, precision
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_gpu, kv_dtype, kv_tokens_in
from llmfleet.planner.lora import explain_lora, lora_plan
from llmfleet.planner.memory import GIB, weights_gib
from llmfleet.planner.pod_settings import shm_size_gib, startup_budget
from llmfleet.planner.result import Plan
from llmfleet.planner.settings import Settings, vllm_args

# CPU-only pods: Python, the tokenizer and activations beside the weights and the KV cache.
CPU_RUNTIME_GIB = 2


def plan_cpu(
    spec: LLMDeploymentSpec,
    arch: ModelArchitecture,
    settings: Settings,
    extra: tuple[ArgGroup, ...],
) -> Plan:
    length = settings.max_model_len
    cache_gib = spec.engine.cpu_kv_cache_gib
    bytes_per_token = kv_bytes_per_token_per_gpu(
        arch, kv_dtype(spec.model.dtype, settings.kv_cache_dtype), 1
    )
    tokens = kv_tokens_in(cache_gib, bytes_per_token)
    if tokens < length:
        needed = math.ceil(bytes_per_token * length / GIB * 100) / 100
        raise PlanError(
            "spec.engine.cpuKVCacheGiB",
            f"{cache_gib:g} GiB of KV cache holds {tokens:,} tokens of {spec.model.name}, less "
            f"than one {length}-token sequence (maxModelLen); set cpuKVCacheGiB to at least "
            f"{needed:g} or lower spec.engine.maxModelLen to {max(16, tokens)} or less",
        )
    total_weights = weights_gib(arch, spec.model.dtype, settings.weights)
    lora = lora_plan(arch, settings.lora, tensor_parallel_size=1)
    # vLLM's CPU backend keeps the LoRA buffers in host memory, beside its cache of adapters.
    lora_gib = 0.0 if lora is None else lora.gpu_gib_per_gpu + lora.cpu_gib_per_pod
    memory = math.ceil(total_weights + cache_gib + CPU_RUNTIME_GIB + lora_gib)
    max_num_seqs = concurrency_for(tokens // settings.workload.tokens, settings.max_num_seqs)
    sequences = tokens // length
    reason = (
        f"No spec.gpus, so one vLLM CPU pod. {spec.model.name} has {total_weights:.1f} GiB of "
        f"{precision(settings.weights)} weights ({arch.parameters_billions:g}B parameters) in host "
        f"memory; the {cache_gib:g} GiB KV cache (engine.cpuKVCacheGiB) holds {tokens:,} "
        f"tokens, {plural(sequences, 'sequence')} of {length:,} tokens. "
        f"Suggested memory request: {memory} GiB (weights + KV cache + {CPU_RUNTIME_GIB} GiB "
        f"runtime{' + LoRA' if lora else ''}). "
        f"{explain_cpu_batching(settings, max_num_seqs, tokens)}"
    )
    if lora is not None:
        reason += " " + explain_lora(lora, on_gpus=False)
    min_replicas, max_replicas = autoscaling_bounds(spec, 1)
    return Plan(
        strategy="SinglePod",
        replicas=1,
        gpus_per_replica=0,
        tensor_parallel_size=1,
        weights_gib_per_gpu=0.0,
        kv_cache_tokens_per_replica=tokens,
        max_concurrent_sequences=max_num_seqs,
        vllm_args=vllm_args(spec, settings, 1, max_num_seqs, extra),
        reason=reason,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        total_gpus=0,
        weights_gib=round(total_weights, 2),
        kv_cache_gib_per_gpu=0.0,
        reserve_gib_per_gpu=0.0,
        max_model_len=length,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        shm_size_gib=shm_size_gib(1),
        startup_budget_seconds=startup_budget(total_weights),
        cpu_memory_gib=memory,
        target_queue_depth=target_queue_depth(spec, max_num_seqs),
        lora=lora,
    )
