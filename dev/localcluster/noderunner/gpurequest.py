"""How many GPUs a pod asks for: the one reading of `nvidia.com/gpu` that the runner's admission,
its router check and its real-GPU mode share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


def container_gpus(container: Mapping[str, Any]) -> int:
    """A container's GPUs: its limit, else its request (an extended resource's request defaults
    to its limit, and may not differ from it)."""
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(
        GPU_RESOURCE
    )
    return int(value or 0)


def requested_gpus(pod: Mapping[str, Any]) -> int:
    """The pod's GPUs, summed over its containers."""
    return sum(container_gpus(c) for c in (pod.get("spec") or {}).get("containers") or [])
