"""The prose of a plan's `reason` and of refusals: sizes, fits and batching in words."""

from __future__ import annotations

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.models.startup import StartPhases
from llmfleet.planner.candidates import (
    MAX_NUM_SEQS_CAP,
    MIN_CONCURRENT_SEQUENCES,
    Evaluated,
    Workload,
)
from llmfleet.planner.kv_cache import kv_bytes_per_token_per_gpu, kv_dtype
from llmfleet.planner.memory import GpuFit, weights_gib
from llmfleet.planner.placement import Gpus
from llmfleet.planner.settings import Settings
from llmfleet.planner.weights import Weights


def precision(weights: Weights) -> str:
    if weights.checkpoint is not None:
        return weights.checkpoint.format.label
    return weights.words


def join(numbers: list[int] | tuple[int, ...]) -> str:
    return ", ".join(str(number) for number in numbers)


def plural(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def explain_sizing(
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    chosen: GpuFit,
) -> str:
    total = weights_gib(arch, spec.model.dtype, settings.weights)
    kv = kv_dtype(spec.model.dtype, settings.kv_cache_dtype)
    kv_kib = kv_bytes_per_token_per_gpu(arch, kv, 1) / 1024
    return (
        f"{spec.model.name} has {total:.1f} GiB of {precision(settings.weights)} weights "
        f"({arch.parameters_billions:g}B parameters) and {kv_kib:g} KiB of KV cache per token. "
        f"Each {gpus.memory_gib:g} GiB GPU gives vLLM {chosen.budget_gib:.2f} GiB "
        f"(gpuMemoryUtilization {settings.gpu_memory_utilization:g}), {chosen.reserve_gib:.2f} "
        f"GiB of it kept for activations and the runtime"
        + (f" and {chosen.lora_gib:.2f} GiB for LoRA buffers." if chosen.lora_gib else ".")
    )


def describe_fit(fit: GpuFit, length: int) -> str:
    return (
        f"{fit.weights_gib:.2f} GiB of weights and {fit.kv_cache_gib:.2f} GiB of KV cache "
        f"({fit.kv_tokens:,} tokens, {fit.sequences(length)} sequences of {length:,} tokens) "
        f"per GPU{compile_cached_words(fit.kv_tokens, fit.kv_tokens_compile_cached)}"
    )


def compile_cached_words(fresh: int, cached: int | None) -> str:
    """What a pod that loads its torch.compile cache gets, where it differs from a fresh
    compile's figure (w8a8 weights): the first pod compiles, the plan is made by its figure."""
    if cached is None or cached == fresh:
        return ""
    return (
        f", {cached:,} tokens when the engine finds its compile cache (its compiled forward "
        "peaks lower; sequences are planned by the fresh compile's figure)"
    )


def explain_smaller_sizes(
    settings: Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
    chosen: int,
    sixteen_bit: bool = True,
) -> str:
    length = settings.max_model_len
    text = f"At TP={chosen}: {describe_fit(fits[chosen], length)}."
    sequences = fits[chosen].sequences(length)
    if sequences < MIN_CONCURRENT_SEQUENCES:
        text += (
            f" Only {plural(sequences, 'full-length sequence')} fit, below the "
            f"{MIN_CONCURRENT_SEQUENCES} the planner aims for; expect queueing, or use "
            f"{'fp8, ' if sixteen_bit else ''}more GPUs or a shorter maxModelLen."
        )
    smaller = [size for size in sizes if size < chosen]
    if not smaller:
        return text
    enough = [s for s in smaller if fits[s].sequences(length) >= MIN_CONCURRENT_SEQUENCES]
    if enough:
        fit = fits[enough[0]]
        return (
            f"TP={fit.tensor_parallel_size} would already fit "
            f"{plural(fit.sequences(length), 'sequence')} of {length:,} tokens. {text}"
        )
    below = fits[smaller[-1]]
    if below.kv_tokens == 0:
        shortfall = f"{below.weights_gib:.2f} GiB of weights per GPU leave no room for KV cache"
    else:
        shortfall = (
            f"{below.kv_cache_gib:.2f} GiB of KV cache per GPU holds {below.kv_tokens:,} "
            f"tokens, {plural(below.sequences(length), 'sequence')} of {length:,} tokens, "
            f"fewer than the {MIN_CONCURRENT_SEQUENCES} wanted"
        )
    return f"At TP={below.tensor_parallel_size}, {shortfall}. {text}"


def explain_batching(settings: Settings, chosen: Evaluated, by_slo: bool) -> str:
    workload = settings.workload
    if settings.max_num_seqs is not None:
        source = "as set"
    elif by_slo and chosen.prediction and chosen.prediction.max_concurrency_within_slo:
        source = "the most whose predicted ITL meets spec.slo"
    else:
        source = kv_bound_source(chosen.fit.kv_tokens, workload)
    return batching_sentence(settings, chosen.max_num_seqs, source)


def batching_sentence(settings: Settings, max_num_seqs: int, source: str, unit: str = "pod") -> str:
    return (
        f"Each {unit} runs up to {max_num_seqs} sequences at once ({source}) and batches up to "
        f"{settings.max_num_batched_tokens:,} tokens per step."
    )


def kv_bound_source(kv_tokens: int, workload: Workload) -> str:
    return (
        f"what {kv_tokens:,} KV tokens hold of {workload.prompt_tokens}+"
        f"{workload.output_tokens}-token requests, at most {MAX_NUM_SEQS_CAP}; vLLM preempts "
        "beyond that, so fewer would only throttle it"
    )


def explain_cpu_batching(settings: Settings, max_num_seqs: int, kv_tokens: int) -> str:
    source = (
        "as set"
        if settings.max_num_seqs is not None
        else kv_bound_source(kv_tokens, settings.workload)
    )
    return batching_sentence(settings, max_num_seqs, source)


def start_phases_words(phases: StartPhases) -> str:
    """One pod's predicted start, phase by phase, in the order they run."""
    parts = (
        ("scheduling", phases.scheduling_seconds),
        ("imports", phases.imports_seconds),
        ("download", phases.download_seconds),
        ("weight load", phases.weight_load_seconds),
        ("torch.compile", phases.compile_seconds),
        ("CUDA graphs", phases.cuda_graphs_seconds),
        ("KV profiling", phases.kv_profiling_seconds),
        ("API ready", phases.api_ready_seconds),
    )
    shown = ", ".join(f"{name} {seconds:.0f}" for name, seconds in parts if seconds >= 0.5)
    return f"{phases.total_seconds:.0f} s ({shown})"
