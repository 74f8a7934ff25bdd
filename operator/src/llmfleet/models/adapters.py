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
from llmfleet.models.model_spec import (
    LOCAL_OR_HUB_PATTERN,
    NAME_SEGMENT_PATTERN,
    Revision,
)
from llmfleet.models.refs import ObjectName, VolumeClaimRef

MAX_ADAPTERS = 64
MAX_ADAPTER_NAME_LENGTH = 128
ADAPTER_NAME_PATTERN = rf"^{NAME_SEGMENT_PATTERN}$"
# vLLM's runtime loader (vllm/lora/utils.py get_adapter_absolute_path) resolves a local path or
# downloads a Hugging Face repo at main; the engine pod's adapter fetcher (llmfleet.fetcher)
# copies s3:// and gs:// trees, and Hub repos at a revision, next to the engine first.
OBJECT_STORE_SOURCE_PATTERN = r"(s3|gs)://[a-z0-9][-a-z0-9._]{1,61}[a-z0-9](/[^\s]*)?"
ADAPTER_SOURCE_PATTERN = rf"^({LOCAL_OR_HUB_PATTERN}|{OBJECT_STORE_SOURCE_PATTERN})$"

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


def _is_path_or_uri(source: str) -> bool:
    return source.startswith(("/", "s3://", "gs://"))


class AdapterSpec(ApiModel):
    """A LoRA adapter of the base model, served under its own name."""

    cel_rules = (
        CelRule(
            rule=(
                "!has(self.revision) || !(self.source.startsWith('/') || "
                "self.source.startsWith('s3://') || self.source.startsWith('gs://'))"
            ),
            message=(
                "revision is for a Hugging Face repo id source (org/name): a path or an "
                "s3:// or gs:// prefix has no revisions"
            ),
            holds=lambda a: a.revision is None or not _is_path_or_uri(a.source),
            field="revision",
        ),
    )

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
            "Where the adapter comes from: a Hugging Face repo id, `name` or `org/name` "
            "(with spec.model.tokenSecretRef's token, at `revision`, else main); an object-store "
            "prefix, s3://bucket/path or gs://bucket/path, holding adapter_config.json and the "
            "weights (credentials and endpoint: spec.engine.lora.objectStore); or an absolute "
            "path inside the engine container: under "
            f"{ADAPTERS_MOUNT_PATH} on spec.engine.lora.claim (e.g. "
            f"{ADAPTERS_MOUNT_PATH}/sql), or on spec.model.cache's claim. Object-store and "
            "revisioned sources are copied into the engine pod by its adapter fetcher "
            "(single-node layouts only)."
        ),
    )
    revision: Revision | None = Field(
        default=None,
        description=(
            "Hub revision of a Hugging Face `source`: a branch, a tag or a commit hash. Only for "
            "a Hub repo id. Unset: main, downloaded by vLLM itself. Changing it loads the "
            "adapter again."
        ),
    )


class ObjectStoreSpec(ApiModel):
    """Where and as whom the adapter fetcher reads s3:// and gs:// sources."""

    endpoint: str | None = Field(
        default=None,
        max_length=1_024,
        pattern=r"^https?://[^\s/]+(/[^\s]*)?$",
        description=(
            "S3 API endpoint for s3:// sources, for S3-compatible stores (MinIO, Ceph, "
            "SeaweedFS, ...): e.g. https://minio.storage:9000, path-style addressing. Unset: "
            "AWS S3. gs:// sources always use Google Cloud Storage's S3-compatible XML API "
            "(https://storage.googleapis.com) with HMAC keys."
        ),
    )
    region: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9-]+$",
        description="Region of the bucket (AWS_REGION), e.g. eu-west-1. Unset: us-east-1.",
    )
    secret_ref: ObjectName | None = Field(
        default=None,
        description=(
            "Name of a Secret in the LLMDeployment's namespace whose keys become the fetcher's "
            "environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
            "an S3 access key, or a Google Cloud Storage HMAC key for gs://. Unset: the "
            "default AWS credential chain, e.g. IAM roles for service accounts on EKS."
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
    object_store: ObjectStoreSpec | None = Field(
        default=None,
        description=(
            "Endpoint, region and credentials for s3:// and gs:// adapter sources, given to the "
            "engine pods' adapter fetcher. Part of the pod template: setting or changing it "
            "restarts the engines once. Unset: AWS S3 with the default credential chain."
        ),
    )
