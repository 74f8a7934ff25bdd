"""Pod settings a plan carries for the renderer: /dev/shm, the startup budget and the
nodeSelector.

They are worked out here, not in render/, because the Plan carries them beyond rendering
(`llmfleet plan` prints them, the missing-object check reads the nodeSelector) and the planner
never imports render/."""

from __future__ import annotations

import math

from llmfleet.planner.placement import Gpus

# NCCL and vLLM's custom all-reduce exchange through /dev/shm; 15 GiB at TP=8 matches what
# vLLM's multi-GPU deployment examples use.
SHM_BASE_GIB = 1
SHM_GIB_PER_EXTRA_GPU = 2
# CPU plans only (GPU plans predict their start per phase, see `startup`): download (about
# 100 MiB/s), load and warm-up, a floor plus time per weight GiB.
STARTUP_BASE_SECONDS = 300
STARTUP_SECONDS_PER_WEIGHT_GIB = 10
# Set by NVIDIA GPU feature discovery on every GPU node.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def shm_size_gib(tensor_parallel_size: int) -> int:
    return SHM_BASE_GIB + SHM_GIB_PER_EXTRA_GPU * (tensor_parallel_size - 1)


def startup_budget(total_weights_gib: float) -> int:
    return STARTUP_BASE_SECONDS + math.ceil(total_weights_gib * STARTUP_SECONDS_PER_WEIGHT_GIB)


def node_selector(gpus: Gpus) -> dict[str, str]:
    selector = dict(gpus.node_selector)
    if gpus.product:
        selector[GPU_PRODUCT_LABEL] = gpus.product
    return dict(sorted(selector.items()))
