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
    cuda_gib: float | None = Field(
        default=None,
        alias="cudaGiB",
        gt=0,
        description=(
            "What CUDA reports of one GPU's memory (torch.cuda.mem_get_info's total), GiB, where "
            "measured: vLLM applies gpuMemoryUtilization to it. Unset, memoryGiB less 0.82 (an "
            "H100 80GB's difference)."
        ),
    )
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
    # The performance model's per-GPU constants (datasheet figures); without them the planner
    # sizes memory but cannot predict speed.
    hbm_gbps: float | None = Field(
        default=None, alias="hbmGBps", gt=0, description="Memory bandwidth, GB/s."
    )
    bf16_tflops: float | None = Field(
        default=None, alias="bf16TFLOPS", gt=0, description="Dense bf16 tensor TFLOP/s."
    )
    fp8_tflops: float | None = Field(
        default=None,
        alias="fp8TFLOPS",
        gt=0,
        description="Dense fp8 tensor TFLOP/s; unset where fp8 runs as weight-only (bf16 math).",
    )
    interconnect_gbps: float | None = Field(
        default=None,
        alias="interconnectGBps",
        gt=0,
        description="GPU-to-GPU bandwidth per direction within a node (NVLink or PCIe), GB/s.",
    )

    @property
    def has_performance(self) -> bool:
        return None not in (self.hbm_gbps, self.bf16_tflops, self.interconnect_gbps)


GpuProfiles = Mapping[str, GpuProfile]

DEFAULT_GPU_PROFILES: dict[str, GpuProfile] = {
    name: GpuProfile.model_validate(body)
    for name, body in {
        # NVIDIA datasheets: HBM bandwidth, dense (not sparse) tensor TFLOP/s, NVLink
        # bandwidth per direction (half the bidirectional figure), or PCIe Gen4 x16.
        "h100-80gb": {
            "memoryGiB": 80,
            "cudaGiB": 79.18,
            "perNode": 8,
            "product": "NVIDIA-H100-80GB-HBM3",
            "hbmGBps": 3350,
            "bf16TFLOPS": 989,
            "fp8TFLOPS": 1979,
            "interconnectGBps": 450,
        },
        "h200-141gb": {
            "memoryGiB": 140,
            "cudaGiB": 139.8,
            "perNode": 8,
            "product": "NVIDIA-H200",
            "hbmGBps": 4800,
            "bf16TFLOPS": 989,
            "fp8TFLOPS": 1979,
            "interconnectGBps": 450,
        },
        "a100-80gb": {
            "memoryGiB": 80,
            "perNode": 8,
            "product": "NVIDIA-A100-SXM4-80GB",
            "hbmGBps": 2039,
            "bf16TFLOPS": 312,
            "interconnectGBps": 300,
        },
        "a100-40gb": {
            "memoryGiB": 40,
            "perNode": 8,
            "product": "NVIDIA-A100-SXM4-40GB",
            "hbmGBps": 1555,
            "bf16TFLOPS": 312,
            "interconnectGBps": 300,
        },
        "l40s": {
            "memoryGiB": 48,
            "perNode": 8,
            "product": "NVIDIA-L40S",
            "hbmGBps": 864,
            "bf16TFLOPS": 362,
            "fp8TFLOPS": 733,
            "interconnectGBps": 32,
        },
        "l4": {
            "memoryGiB": 24,
            "perNode": 8,
            "product": "NVIDIA-L4",
            "hbmGBps": 300,
            "bf16TFLOPS": 121,
            "fp8TFLOPS": 242,
            "interconnectGBps": 32,
        },
    }.items()
}

_PROFILES = TypeAdapter(dict[str, GpuProfile])


def parse_gpu_profiles(text: str) -> dict[str, GpuProfile]:
    """Profiles from YAML (a map of name to profile), as the chart's ConfigMap holds them."""
    return _PROFILES.validate_python(yaml.safe_load(text) or {})
