"""The layouts a spec's GPUs allow, each evaluated once (memory fit, concurrency, predicted
speed), and the choice among them: by prediction where the GPU has performance constants (see
`candidates`), else the memory rules' layout (see `memory_layout`)."""

from __future__ import annotations

from llmfleet.catalog.gpu_profiles import DEFAULT_GPU_PROFILES
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import ModelArchitecture
from llmfleet.planner.candidates import (
    Evaluated,
    choose_by_prediction,
    concurrency_for,
    meets,
    predict,
    why_lost,
)
from llmfleet.planner.errors import PlanError
from llmfleet.planner.memory import GpuFit
from llmfleet.planner.memory_layout import Layout
from llmfleet.planner.parallelism import splits_evenly
from llmfleet.planner.performance import pod_model
from llmfleet.planner.placement import Gpus
from llmfleet.planner.result import Candidate
from llmfleet.planner.settings import Settings

KNOWN_PRODUCTS = tuple(
    sorted(f"{p.product} ({n})" for n, p in DEFAULT_GPU_PROFILES.items() if p.has_performance)
)


def to_candidate(spec: LLMDeploymentSpec, c: Evaluated, chosen: Evaluated, why: str) -> Candidate:
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


def allowed_sizes(
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
        if size > count or not fits[size].starts(length):
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


def evaluate(  # noqa: PLR0917
    spec: LLMDeploymentSpec,
    gpus: Gpus,
    arch: ModelArchitecture,
    settings: Settings,
    sizes: tuple[int, ...],
    fits: dict[int, GpuFit],
    by_memory: Layout,
) -> list[Evaluated]:
    if gpus.performance is None:
        # Memory rules alone: the only candidate is the one they choose.
        allowed = [by_memory.tensor_parallel_size]
    else:
        allowed = allowed_sizes(spec, gpus, sizes, fits, settings.max_model_len)
    out = []
    for size in allowed:
        fit = fits[size]
        seqs = concurrency_for(fit.sequences(settings.workload.tokens), settings.max_num_seqs)
        prediction = None
        if gpus.performance is not None:
            pod = pod_model(
                arch,
                dtype=spec.model.dtype,
                quantization=settings.weights,
                kv_cache_dtype=settings.kv_cache_dtype,
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


def choose(
    spec: LLMDeploymentSpec, candidates: list[Evaluated], by_memory: Layout
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
        raise slo_unmet(spec, predicted)
    return choose_by_prediction(predicted, spec.objective, spec.slo)


def slo_unmet(spec: LLMDeploymentSpec, candidates: list[Evaluated]) -> PlanError:
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
