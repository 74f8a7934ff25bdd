"""The layout the memory rules choose: the strategy's pods of the smallest tensor-parallel size
that fits (Throughput) or the widest (Latency), and the refusals, with what would fit, when no
size does. It is the plan itself on GPUs without performance constants."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.models.status import PlannedStrategy
from llmfleet.planner.activation_peak import batched_tokens_within
from llmfleet.planner.candidates import MIN_CONCURRENT_SEQUENCES
from llmfleet.planner.errors import PlanError
from llmfleet.planner.explain import join, plural, precision
from llmfleet.planner.kv_cache import kv_dtype, kv_layout
from llmfleet.planner.memory import (
    GpuFit,
    memory_for_budget,
    usable_gib,
    weights_gib,
)
from llmfleet.planner.parallelism import counts_that_split, splits_evenly
from llmfleet.planner.placement import Gpus
from llmfleet.planner.settings import Settings, gpu_fit


@dataclass(frozen=True)
class Layout:
    strategy: PlannedStrategy
    tensor_parallel_size: int
    why: str


def choose_layout(
    spec: LLMDeploymentSpec,
    *,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> Layout:
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
                f"KV heads: one of {join(sizes)}",
            )
        if not fits[count].starts(length):
            raise does_not_fit(
                spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits
            )
        return Layout(
            "SinglePod",
            count,
            f"strategy SinglePod: one pod with all {count} GPUs (TP={count}).",
        )

    within = [size for size in sizes if size <= count]
    acceptable = [size for size in within if fits[size].starts(length)]
    if not acceptable:
        raise does_not_fit(spec, gpus=gpus, arch=arch, settings=settings, sizes=sizes, fits=fits)
    preferred = [s for s in acceptable if fits[s].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    smallest = (preferred or acceptable)[0]

    if spec.strategy == "Auto" and spec.objective == "Latency":
        even = [size for size in acceptable if splits_evenly(count, size, gpus.per_node)]
        if not even:
            raise uneven_count(spec, gpus, smallest)
        widest = even[-1]
        pods = count // widest
        layout = "one pod" if pods == 1 else f"{pods} pods of {widest} GPUs"
        return Layout(
            "SinglePod" if pods == 1 else "MultiPod",
            widest,
            f"Objective Latency takes the widest tensor parallelism the {count} GPUs allow "
            f"within a node, TP={widest}, to spread each token's work over more GPUs: "
            f"{layout}.",
        )

    if not splits_evenly(count, smallest, gpus.per_node):
        raise uneven_count(spec, gpus, smallest)
    pods = count // smallest
    if spec.strategy == "MultiPod":
        if pods < 2:
            raise PlanError(
                "spec.strategy",
                f"strategy MultiPod needs at least two pods, but {spec.model.name} needs "
                f"tensor-parallel size {smallest}, so {count} GPUs make one pod; use strategy "
                "SinglePod or Auto, or spec.gpus.count of "
                + join(counts_that_split(smallest, gpus.per_node)[1:]),
            )
        return Layout(
            "MultiPod",
            smallest,
            f"strategy MultiPod: {pods} pods of the smallest fitting size, TP={smallest}.",
        )
    if pods == 1:
        return Layout(
            "SinglePod", smallest, f"TP={smallest} takes all {count} GPUs, so they form one pod."
        )
    return Layout(
        "MultiPod",
        smallest,
        f"Objective Throughput prefers independent replicas to wider tensor parallelism "
        f"(no cross-GPU all-reduce per layer, each pod batches on its own), so the {count} "
        f"GPUs run as {pods} pods of TP={smallest} rather than one wider pod.",
    )


def uneven_count(spec: LLMDeploymentSpec, gpus: Gpus, size: int) -> PlanError:
    nodes = "" if gpus.count <= gpus.per_node else f" filling nodes of {gpus.per_node} GPUs"
    return PlanError(
        "spec.gpus.count",
        f"{gpus.count} GPUs do not split into pods of {size} GPUs{nodes}; {size} is the "
        f"smallest tensor-parallel size that fits {spec.model.name}. GPU counts that work: "
        f"{join(counts_that_split(size, gpus.per_node))}",
    )


def does_not_fit(
    spec: LLMDeploymentSpec,
    *,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
) -> PlanError:
    length = settings.max_model_len
    widest = max(size for size in sizes if size <= gpus.count)
    fit = fits[widest]
    layout = kv_layout(
        arch,
        kv_dtype(spec.model.dtype, settings.kv_cache_dtype),
        widest,
        1,
        settings.max_num_batched_tokens,
    )
    one_sequence = layout.sequence_gib(length)
    needed = fit.weights_gib + fit.reserve_gib + fit.lora_gib + one_sequence
    lora = f"+ {fit.lora_gib:.2f} GiB of LoRA buffers " if fit.lora_gib else ""
    model = (
        f"{spec.model.name} ({weights_gib(arch, spec.model.dtype, settings.weights):.1f} "
        f"GiB of {precision(settings.weights)} weights)"
    )
    numbers = (
        f"at tensor-parallel size {widest} each GPU needs {fit.weights_gib:.2f} GiB of weights "
        f"+ {fit.reserve_gib:.2f} GiB runtime reserve {lora}+ {one_sequence:.2f} GiB of KV "
        f"cache for one {length}-token sequence = {needed:.2f} GiB, but vLLM may use "
        f"{fit.budget_gib:.2f} GiB ({usable_gib(gpus.memory_gib, gpus.cuda_gib):.2f} GiB that "
        "CUDA reports of "
        f"{gpus.memory_gib:g} GiB x gpuMemoryUtilization "
        f"{settings.gpu_memory_utilization:g})"
    )
    options: list[str] = []
    wider = [s for s in sizes if s > widest and fits[s].starts(length)]
    if wider:
        options.append(f"spec.gpus.count {wider[0]} (tensor-parallel size {wider[0]})")
    if settings.weights.sixteen_bit:
        fp8 = gpu_fit(spec, gpus, arch, settings, widest, fp8=True)
        if fp8.starts(length):
            options.append(
                f"spec.model.quantization fp8 ({fp8.weights_gib:.2f} GiB of weights per GPU, "
                f"{plural(fp8.sequences(length), 'full-length sequence')} of KV cache at "
                f"TP={widest})"
            )
    if settings.kv_cache_dtype == "auto":
        fp8_kv = gpu_fit(spec, gpus, arch, replace(settings, kv_cache_dtype="fp8"), widest)
        if fp8_kv.starts(length):
            held = plural(fp8_kv.sequences(length), "full-length sequence")
            options.append(
                f"spec.engine.kvCacheDtype fp8 ({held} of KV cache at TP={widest}, 1 byte per "
                "element)"
            )
    longest = fit.longest_start(length)
    if longest >= 16:
        # Only where some KV cache is left: with none, a shorter context frees nothing (the
        # activation reserve follows maxNumBatchedTokens, not maxModelLen).
        options.append(f"spec.engine.maxModelLen {longest} or less")
    room = fit.budget_gib - fit.weights_gib - fit.lora_gib - one_sequence
    batched = batched_tokens_within(
        arch, room, fit.tensor_parallel_size, settings.weights.triton_experts
    )
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
        field, where = "spec.gpus.count", f"on {plural(gpus.count, 'GPU')}"
    else:
        field, where = "spec.gpus", f"on one node of {gpus.per_node} GPUs"
    return PlanError(
        field, f"{model} does not fit {where}: {numbers}. Would fit: {'; '.join(options)}"
    )
