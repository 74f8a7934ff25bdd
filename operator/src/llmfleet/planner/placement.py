"""The GPUs a plan lays out on: `spec.gpus` with its profile applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmfleet.catalog.gpu_profiles import GpuProfile, GpuProfiles
from llmfleet.models.defaults import DEFAULT_GPUS_PER_NODE
from llmfleet.models.gpus import GpuSpec
from llmfleet.planner.errors import PlanError
from llmfleet.planner.performance import Gpu


@dataclass(frozen=True)
class Gpus:
    count: int
    memory_gib: float
    per_node: int
    product: str | None
    # What CUDA reports of memory_gib, where the profile measured it (memory.usable_gib otherwise).
    cuda_gib: float | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    # Datasheet figures for the performance model, and the profile they came from; None when
    # neither spec.gpus.profile nor spec.gpus.product names a GPU the operator has figures for
    # (then the layout is chosen by memory alone and spec.slo is refused).
    performance: Gpu | None = None
    performance_profile: str | None = None


def _performance(
    gpus: GpuSpec, profiles: GpuProfiles, profile: GpuProfile | None
) -> tuple[Gpu | None, str | None]:
    product = gpus.product or (profile.product if profile else None)
    if profile is not None and gpus.profile is not None and profile.has_performance:
        name: str | None = gpus.profile
        source: GpuProfile | None = profile
    elif product is not None:
        # A profile without figures (memory and placement only) borrows those of another
        # profile of the same GPU product, such as the built-in one.
        named = [n for n, p in sorted(profiles.items()) if p.product == product]
        name = next((n for n in named if profiles[n].has_performance), named[0] if named else None)
        source = profiles[name] if name else None
    else:
        return None, None
    if source is None or not source.has_performance:
        return None, None
    assert source.hbm_gbps
    assert source.bf16_tflops
    assert source.interconnect_gbps
    return (
        Gpu(source.hbm_gbps, source.bf16_tflops, source.fp8_tflops, source.interconnect_gbps),
        name,
    )


def resolve_gpus(gpus: GpuSpec, profiles: GpuProfiles) -> Gpus:
    """Fields set in the spec win over the profile's; the profile wins over defaults."""
    profile = None
    if gpus.profile is not None:
        profile = profiles.get(gpus.profile)
        if profile is None:
            known = ", ".join(sorted(profiles)) or "none are installed"
            raise PlanError(
                "spec.gpus.profile",
                f"unknown GPU profile {gpus.profile!r}; the operator knows: {known} "
                "(Helm value gpuProfiles)",
            )
    memory = (
        gpus.memory_gib
        if gpus.memory_gib is not None
        else (profile.memory_gib if profile else None)
    )
    if memory is None:
        raise PlanError(
            "spec.gpus.memoryGiB", "required unless spec.gpus.profile names a GPU profile"
        )
    per_node = gpus.per_node or (profile.per_node if profile else DEFAULT_GPUS_PER_NODE)
    performance, performance_profile = _performance(gpus, profiles, profile)
    return Gpus(
        count=gpus.count,
        memory_gib=memory,
        # The profile's measurement holds for the profile's memory, not one the spec overrides.
        cuda_gib=profile.cuda_gib if profile and gpus.memory_gib is None else None,
        per_node=per_node,
        product=gpus.product or (profile.product if profile else None),
        node_selector=dict(profile.node_selector) if profile else {},
        tolerations=profile.tolerations if profile else (),
        performance=performance,
        performance_profile=performance_profile,
    )
