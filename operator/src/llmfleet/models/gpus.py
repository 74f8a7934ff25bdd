"""`spec.gpus`: the accelerators the planner may lay the model out on."""

from __future__ import annotations

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.defaults import DEFAULT_GPUS_PER_NODE

MAX_GPUS_PER_NODE = 16


class GpuSpec(ApiModel):
    """GPUs for the deployment at its minimum scale."""

    cel_rules = (
        CelRule(
            # Pods never span nodes, so a count above one node must fill whole nodes.
            rule=(
                "!has(self.perNode) || self.count <= self.perNode || self.count % self.perNode == 0"
            ),
            message=(
                "count must be at most perNode or a multiple of perNode (GPUs beyond one "
                "node must fill whole nodes)"
            ),
            holds=lambda g: (
                g.per_node is None or g.count <= g.per_node or g.count % g.per_node == 0
            ),
            field="count",
        ),
        CelRule(
            rule="has(self.memoryGiB) || has(self.profile)",
            message=(
                "set memoryGiB (GPU memory in GiB) or profile (a GPU profile installed with the "
                "operator, e.g. h100-80gb)"
            ),
            holds=lambda g: g.memory_gib is not None or g.profile is not None,
            field="memoryGiB",
        ),
    )

    count: int = Field(
        ge=1,
        le=1_024,
        description=(
            "GPUs used by the planned layout at minimum scale (all replicas together), at "
            "least 1. The planner splits them into pods of tensor-parallel size each; "
            "autoscaling adds pods of the same size."
        ),
    )
    memory_gib: float | None = Field(
        default=None,
        alias="memoryGiB",
        gt=0,
        le=1_024,
        description=(
            "Memory of one GPU in GiB (e.g. 80 for H100-80GB, 141 for H200). Optional when "
            "profile names a GPU profile, which supplies it."
        ),
    )
    per_node: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS_PER_NODE,
        description=(
            "GPUs per node, 1 to 16. Tensor parallelism stays within one node, so this caps "
            "the tensor-parallel size. Default: the profile's, else "
            f"{DEFAULT_GPUS_PER_NODE}."
        ),
    )
    product: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description=(
            "GPU product label value (e.g. NVIDIA-H100-80GB-HBM3); when set, pods get a "
            "nodeSelector on nvidia.com/gpu.product so they land on that GPU model. A label "
            "value: letters, digits, '-', '_' and '.', starting and ending with a letter or "
            "digit."
        ),
    )
    profile: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description=(
            "Name of a GPU profile installed with the operator (Helm value gpuProfiles, e.g. "
            "h100-80gb, a100-40gb, l4). It supplies memoryGiB, perNode, product and the "
            "nodeSelector/tolerations of that node pool; fields set here win."
        ),
    )
