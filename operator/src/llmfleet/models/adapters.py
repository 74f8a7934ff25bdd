"""`spec.adapters` and `spec.engine.lora`: LoRA adapters served beside the base model, the room
vLLM keeps for them, and a claim they may be read from.

vLLM sizes its LoRA buffers once, at start (--max-loras, --max-lora-rank, --max-cpu-loras), and
the operator loads and unloads adapters in the running engines. So the defaults here never
depend on the adapter list: adding or removing an adapter must not change vLLM's flags, which
would restart every GPU pod.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.model_spec import LOCAL_OR_HUB_PATTERN, NAME_SEGMENT_PATTERN
from llmfleet.models.refs import VolumeClaimRef

MAX_ADAPTERS = 64
MAX_ADAPTER_NAME_LENGTH = 128
ADAPTER_NAME_PATTERN = rf"^{NAME_SEGMENT_PATTERN}$"
# No s3:// or gs://: vLLM's runtime loader (vllm/lora/utils.py get_adapter_absolute_path)
# resolves a local path or downloads a Hugging Face repo, nothing else.
ADAPTER_SOURCE_PATTERN = rf"^({LOCAL_OR_HUB_PATTERN})$"

# vLLM's LoRAConfig.max_lora_rank accepts exactly these.
LoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_ADAPTERS = 4
DEFAULT_MAX_RANK = 16
# The CPU cache keeps this many adapters per GPU slot, so swapping between twice as many
# adapters as fit the GPUs at once reads no files.
CPU_ADAPTERS_PER_SLOT = 2
MAX_CPU_ADAPTERS = 2 * MAX_ADAPTERS
# Where every engine container mounts spec.engine.lora.claim, read-only.
ADAPTERS_MOUNT_PATH = "/adapters"


class AdapterSpec(ApiModel):
    """A LoRA adapter of the base model, served under its own name."""

    name: str = Field(
        min_length=1,
        max_length=MAX_ADAPTER_NAME_LENGTH,
        pattern=ADAPTER_NAME_PATTERN,
        description=(
            "What clients put in the OpenAI API `model` field to use this adapter: letters, "
            "digits, '-', '_' and '.', starting with a letter or digit, at most "
            f"{MAX_ADAPTER_NAME_LENGTH} characters. Unique among spec.adapters and different "
            "from the base model's served name (model.servedModelName, else model.name)."
        ),
    )
    source: str = Field(
        min_length=1,
        max_length=1_024,
        pattern=ADAPTER_SOURCE_PATTERN,
        description=(
            "Where vLLM loads the adapter from: a Hugging Face repo id, `name` or `org/name` "
            "(downloaded with spec.model.tokenSecretRef's token, at its main revision), or an "
            "absolute path inside the engine container: under "
            f"{ADAPTERS_MOUNT_PATH} on spec.engine.lora.claim (e.g. "
            f"{ADAPTERS_MOUNT_PATH}/sql), or on spec.model.cache's claim. Object-store URIs "
            "(s3://, gs://) are not accepted: vLLM's runtime LoRA loader reads only local paths "
            "and Hugging Face repos."
        ),
    )


class LoraSpec(ApiModel):
    """Room vLLM keeps for LoRA adapters, and the claim it may read them from: fixed when the
    engines start."""

    cel_rules = (
        CelRule(
            rule=(
                "!has(self.maxCpuAdapters) || self.maxCpuAdapters >= "
                f"(has(self.maxAdapters) ? self.maxAdapters : {DEFAULT_MAX_ADAPTERS})"
            ),
            message=(
                "maxCpuAdapters must be at least maxAdapters (default "
                f"{DEFAULT_MAX_ADAPTERS}): vLLM's CPU cache also holds every adapter on the GPUs"
            ),
            holds=lambda lora: (
                lora.max_cpu_adapters is None
                or lora.max_cpu_adapters >= (lora.max_adapters or DEFAULT_MAX_ADAPTERS)
            ),
            field="maxCpuAdapters",
        ),
    )

    max_adapters: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ADAPTERS,
        description=(
            "Adapters one engine runs in the same batch (vLLM --max-loras): each takes a slot "
            "of LoRA buffers on every GPU, sized by maxRank, which comes off the KV cache. "
            "Requests for other adapters wait for a free slot. 1 to "
            f"{MAX_ADAPTERS}. Default {DEFAULT_MAX_ADAPTERS}."
        ),
    )
    max_rank: LoraRank | None = Field(
        default=None,
        description=(
            "Highest LoRA rank an adapter may have (vLLM --max-lora-rank); an adapter of a "
            "higher rank fails to load. Sizes the buffers, so keep it no higher than the "
            f"adapters need. One of {', '.join(map(str, LORA_RANKS))}. Default "
            f"{DEFAULT_MAX_RANK}."
        ),
    )
    max_cpu_adapters: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CPU_ADAPTERS,
        description=(
            "Adapters each engine worker keeps loaded in host memory (vLLM --max-cpu-loras), "
            "so that moving one onto the GPUs reads no files; at least maxAdapters. Default "
            f"{CPU_ADAPTERS_PER_SLOT} x maxAdapters."
        ),
    )
    claim: VolumeClaimRef | None = Field(
        default=None,
        description=(
            "A PersistentVolumeClaim of adapters, mounted read-only at "
            f"{ADAPTERS_MOUNT_PATH} in every engine container (a multi-node replica's leader "
            "and workers alike): spec.adapters[].source names a directory on it as "
            f"{ADAPTERS_MOUNT_PATH}/<path on the claim>. Part of the pod template, so setting "
            "or changing it restarts the engines once; adapters added to the claim later load "
            "without a restart. Unset: no such volume."
        ),
    )
