"""GPU profiles: named node pools (memory, GPUs per node, product label, placement) that an
LLMDeployment refers to with `spec.gpus.profile`. The operator reads them from the file the chart
mounts (Helm value `gpuProfiles`); these defaults match the chart's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import Field, TypeAdapter

from llmfleet.models.base import ApiModel
from llmfleet.models.defaults import DEFAULT_GPUS_PER_NODE


class GpuProfile(ApiModel):
    """One GPU node pool."""

    memory_gib: float = Field(alias="memoryGiB", gt=0, description="Memory of one GPU, GiB.")
    per_node: int = Field(default=DEFAULT_GPUS_PER_NODE, ge=1, le=16, description="GPUs per node.")
    product: str | None = Field(
        default=None, description="nvidia.com/gpu.product label value of these nodes."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra nodeSelector for pods on this pool."
    )
    tolerations: tuple[dict[str, Any], ...] = Field(
        default=(), description="Extra tolerations for pods on this pool."
    )


GpuProfiles = Mapping[str, GpuProfile]

DEFAULT_GPU_PROFILES: dict[str, GpuProfile] = {
    name: GpuProfile.model_validate(body)
    for name, body in {
        "h100-80gb": {"memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"},
        "a100-80gb": {"memoryGiB": 80, "perNode": 8, "product": "NVIDIA-A100-SXM4-80GB"},
        "a100-40gb": {"memoryGiB": 40, "perNode": 8, "product": "NVIDIA-A100-SXM4-40GB"},
        "l40s": {"memoryGiB": 48, "perNode": 8, "product": "NVIDIA-L40S"},
        "l4": {"memoryGiB": 24, "perNode": 8, "product": "NVIDIA-L4"},
    }.items()
}

_PROFILES = TypeAdapter(dict[str, GpuProfile])


def parse_gpu_profiles(text: str) -> dict[str, GpuProfile]:
    """Profiles from YAML (a map of name to profile), as the chart's ConfigMap holds them."""
    return _PROFILES.validate_python(yaml.safe_load(text) or {})
