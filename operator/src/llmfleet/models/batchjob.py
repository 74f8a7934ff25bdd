"""`LLMBatchJob`: offline batch inference of a JSONL file of OpenAI Batch API requests.

`spec.model`, `spec.gpus` and `spec.engine` are the LLMDeployment's own models, planned by the same
planner (`deployment_spec()` turns a batch job into the LLMDeploymentSpec it plans).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from llmfleet import __version__
from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.engine import EngineSpec
from llmfleet.models.gpus import GpuSpec
from llmfleet.models.model_spec import ModelSpec
from llmfleet.models.refs import DataKey, ObjectName
from llmfleet.shard_report import DEFAULT_GRACE_SECONDS

KIND = "LLMBatchJob"
PLURAL = "llmbatchjobs"
# The name is the value of the labels that tie the Job and its pods to the LLMBatchJob.
NAME_RULE = {
    "rule": "size(self.metadata.name) <= 63",
    "message": (
        "metadata.name must be at most 63 characters: it is the value of the labels that tie "
        "the Job and its pods to the LLMBatchJob, and Kubernetes limits label values to 63"
    ),
}
SINGULAR = "llmbatchjob"
SHORT_NAMES = ("llmbj",)
CATEGORIES = ("llmfleet",)

# The vLLM image of images/vllm/ (upstream vLLM plus the llmfleet wheel, which holds the runner).
DEFAULT_BATCH_IMAGE = f"docker.io/llmfleet/vllm:v0.32.0-llmfleet{__version__}"
DEFAULT_MAX_RETRIES_PER_LINE = 3
DEFAULT_MAX_RESTARTS_PER_SHARD = 3
MAX_SHARDS = 1_000
# Under 10 s a stopping shard has no time to finish a line; over 10 minutes an online engine
# waits too long for the GPU of a spare shard it preempts.
MIN_GRACE_SECONDS = 10
MAX_GRACE_SECONDS = 600

BatchPriority = Literal["Normal", "Spare"]

# A path relative to the claim's root, never leaving it.
_PARENT_SEGMENT = r"(^|/)[.][.](/|$)"
_PATH_RULE_CEL = f"!self.path.startsWith('/') && !self.path.matches('{_PARENT_SEGMENT}')"
_PATH_MESSAGE = "path must be relative to the claim's root and must not contain '..'"


def _relative_path(path: str) -> bool:
    return not path.startswith("/") and re.search(_PARENT_SEGMENT, path) is None


class ClaimPath(ApiModel):
    """A file or directory on a PersistentVolumeClaim of the job's namespace."""

    cel_rules = (
        CelRule(
            rule=_PATH_RULE_CEL,
            message=_PATH_MESSAGE,
            holds=lambda c: _relative_path(c.path),
            field="path",
        ),
    )

    claim_name: ObjectName = Field(
        description=(
            "Name of an existing PersistentVolumeClaim in the LLMBatchJob's namespace. With "
            "more than one shard every shard mounts it, so it must be ReadWriteMany (or "
            "ReadOnlyMany for the input)."
        ),
    )
    path: str = Field(
        min_length=1,
        max_length=1_024,
        description="Path relative to the claim's root, e.g. prompts/2025-01.jsonl.",
    )


class ConfigMapKey(ApiModel):
    """One key of a ConfigMap in the job's namespace, for inputs of up to about 1 MiB."""

    name: ObjectName = Field(
        description="Name of the ConfigMap, in the same namespace as the LLMBatchJob.",
    )
    key: DataKey = Field(
        description="Key of the ConfigMap whose value is the JSONL input.",
    )


class BatchInput(ApiModel):
    """Where the JSONL requests are: exactly one of persistentVolumeClaim or configMap."""

    cel_rules = (
        CelRule(
            rule="has(self.persistentVolumeClaim) != has(self.configMap)",
            message="set exactly one of persistentVolumeClaim or configMap",
            holds=lambda i: (i.persistent_volume_claim is None) != (i.config_map is None),
        ),
    )

    persistent_volume_claim: ClaimPath | None = Field(
        default=None,
        description=(
            "The input file on a PersistentVolumeClaim. Each line is one OpenAI Batch API "
            'request: {"custom_id", "method": "POST", "url": "/v1/chat/completions" or '
            '"/v1/completions", "body"}.'
        ),
    )
    config_map: ConfigMapKey | None = Field(
        default=None,
        description="The input as a ConfigMap key, for small inputs (ConfigMaps hold 1 MiB).",
    )


class BatchOutput(ApiModel):
    """Where the results go: one JSONL file per shard in a directory of a claim."""

    persistent_volume_claim: ClaimPath = Field(
        description=(
            "Directory on a PersistentVolumeClaim (created if missing) that receives "
            "shard-NNNNN-of-MMMMM.jsonl, one per shard, in the OpenAI batch output format. "
            "It belongs to this job: another LLMBatchJob may not write to the same claim and "
            "path, and the runner refuses a directory another job has written."
        ),
    )


class SamplingDefaults(ApiModel):
    """Sampling parameters applied to every request whose body does not set them."""

    max_tokens: int | None = Field(
        default=None, ge=1, le=1_048_576, description="Most tokens generated per choice."
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="Sampling temperature; 0 is greedy."
    )
    top_p: float | None = Field(
        default=None, gt=0, le=1, description="Nucleus sampling: the probability mass kept."
    )
    top_k: int | None = Field(
        default=None, ge=-1, description="Keep only the k most likely tokens; -1 keeps all."
    )
    presence_penalty: float | None = Field(
        default=None, ge=-2, le=2, description="OpenAI presence penalty."
    )
    frequency_penalty: float | None = Field(
        default=None, ge=-2, le=2, description="OpenAI frequency penalty."
    )
    seed: int | None = Field(default=None, description="Random seed, for reproducible sampling.")
    stop: tuple[str, ...] | None = Field(
        default=None, max_length=16, description="Strings that end generation when produced."
    )

    def as_body(self) -> dict[str, object]:
        """The defaults as OpenAI request body fields (snake_case), unset ones left out."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in self.model_dump(by_alias=False).items()
            if value is not None
        }


class LLMBatchJobSpec(ApiModel):
    """Offline batch inference of a JSONL file with vLLM's offline engine, sharded over pods."""

    cel_rules = (
        CelRule(
            # Jobs are immutable once created; so is a batch job, which is one Job.
            rule="self == oldSelf",
            message=(
                "spec is immutable: delete the LLMBatchJob and create it again (a job with the "
                "same name and output resumes where the old one stopped)"
            ),
            holds=lambda _: True,
        ),
        CelRule(
            rule="!has(self.parallelism) || !has(self.shards) || self.parallelism <= self.shards",
            message=(
                "parallelism must be at most shards: a shard runs in one pod at a time, so more "
                "would never run"
            ),
            holds=lambda job: (
                job.parallelism is None or job.shards is None or job.parallelism <= job.shards
            ),
            field="parallelism",
        ),
        CelRule(
            rule="!has(self.engine) || !has(self.engine.lora)",
            message=(
                "engine.lora is for an LLMDeployment's spec.adapters: an LLMBatchJob runs the "
                "base model only, so leave it unset"
            ),
            holds=lambda job: job.engine.lora is None,
            field="engine.lora",
        ),
        CelRule(
            rule="!has(self.engine) || !has(self.engine.stallDetection)",
            message=(
                "engine.stallDetection is for an LLMDeployment's serving engines: an "
                "LLMBatchJob's pods serve no traffic to take them out of, so leave it unset"
            ),
            holds=lambda job: job.engine.stall_detection is None,
            field="engine.stallDetection",
        ),
    )

    model: ModelSpec = Field(description="The model to run, as in LLMDeployment.")
    gpus: GpuSpec | None = Field(
        default=None,
        description=(
            "GPUs to lay the model out on, as in LLMDeployment: the planner chooses the "
            "tensor-parallel size per shard and, by default, the shard count. Omit for CPU."
        ),
    )
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        description=(
            "vLLM settings, as in LLMDeployment. engine.image defaults to the LLMFleet vLLM "
            f"image ({DEFAULT_BATCH_IMAGE}), which holds the batch runner; a custom image "
            "must be built from images/vllm too."
        ),
    )
    input: BatchInput = Field(description="The JSONL file of requests.")
    output: BatchOutput = Field(description="Where the results are written.")
    shards: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SHARDS,
        description=(
            "Shares of the lines, each answered by one pod at a time (line i goes to shard i mod "
            "shards). Default: the planner's replica count for spec.gpus. More shards than "
            "parallelism makes smaller pieces, which spread a job's tail over GPUs that free up "
            "late, at the cost of one model load per shard."
        ),
    )
    parallelism: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SHARDS,
        description=(
            "Shards running at once, at most (the Job's parallelism); the others start as "
            "running ones finish. With priority Spare a shard beyond the free GPUs waits Pending "
            "at the spare class and starts as soon as a GPU frees, so the job runs on anywhere "
            "from 0 to parallelism GPUs, growing as online serving leaves GPUs and shrinking as "
            "it takes them back. At most shards. Default: shards (every shard at once)."
        ),
    )
    defaults: SamplingDefaults = Field(
        default_factory=SamplingDefaults,
        description="Sampling parameters applied where a request's body has none.",
    )
    max_retries_per_line: int = Field(
        default=DEFAULT_MAX_RETRIES_PER_LINE,
        ge=0,
        le=100,
        description=(
            "Times a line is run again after its shard's pod died while running it (a crash, or "
            "a stop that outlasted terminationGracePeriodSeconds; a line the pod handed back as "
            "it stopped does not count). After that it gets an error record, so a line that "
            f"crashes the engine cannot stall its shard. Default {DEFAULT_MAX_RETRIES_PER_LINE}."
        ),
    )
    max_restarts_per_shard: int = Field(
        default=DEFAULT_MAX_RESTARTS_PER_SHARD,
        ge=0,
        le=100,
        description=(
            "Pod failures tolerated per shard (the Job's backoffLimitPerIndex); each restart "
            "resumes from the shard's output. A pod preempted, evicted or drained is not a "
            f"failure and does not count. Default {DEFAULT_MAX_RESTARTS_PER_SHARD}."
        ),
    )

    priority: BatchPriority = Field(
        default="Normal",
        description=(
            "Normal: the shards run at the cluster's default priority, as any pod. Spare: they "
            "run at the operator's spare PriorityClass (the chart's priorityClasses.spare), "
            "below every other pod, on GPUs nothing else asks for; when online engines need "
            "those GPUs the scheduler preempts spare shards, and each resumes where it stopped "
            "once a GPU frees, every line still answered exactly once. With no spare class "
            "configured the job waits (Running=False, reason SparePriorityClassUnset). One of "
            "Normal, Spare. Default Normal."
        ),
    )
    termination_grace_period_seconds: int = Field(
        default=DEFAULT_GRACE_SECONDS,
        ge=MIN_GRACE_SECONDS,
        le=MAX_GRACE_SECONDS,
        description=(
            "Seconds a shard pod is given to stop (preemption, drain, deletion): it takes no new "
            "line, hands back the lines the engine has not started, finishes and writes those "
            "it runs, and exits a few seconds before the limit; what it could not finish runs "
            "again in the shard's next pod. A preempting online engine waits at most this long "
            f"for the GPU. Default {DEFAULT_GRACE_SECONDS}."
        ),
    )

    def deployment_spec(self) -> LLMDeploymentSpec:
        """The LLMDeploymentSpec the planner lays this job out from: throughput first, no
        autoscaling (the shard count is fixed)."""
        return LLMDeploymentSpec.model_validate(
            {
                "model": self.model,
                "gpus": self.gpus,
                "engine": self.engine,
                "objective": "Throughput",
                "autoscaling": {"enabled": False},
            }
        )
