"""The GPUs a plan lays out on: `spec.gpus` with its profile applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmfleet.models.defaults import DEFAULT_GPUS_PER_NODE
from llmfleet.models.gpus import GpuSpec
from llmfleet.models.profiles import GpuProfiles
from llmfleet.planner.errors import PlanError


@dataclass(frozen=True)
class Gpus:
    count: int
    memory_gib: float
    per_node: int
    product: str | None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()


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
    return Gpus(
        count=gpus.count,
        memory_gib=memory,
        per_node=per_node,
        product=gpus.product or (profile.product if profile else None),
        node_selector=dict(profile.node_selector) if profile else {},
        tolerations=profile.tolerations if profile else (),
    )
