"""The Indexed Job of an LLMBatchJob: one pod per shard, each running the batch runner
(`python3 -m llmfleet.batch.runner`) with the planner's vLLM engine arguments.

completions = shards and parallelism = spec.parallelism (default: shards, every shard at once);
JOB_COMPLETION_INDEX is the shard. A failed pod is replaced (backoffLimitPerIndex) only once it is
gone (podReplacementPolicy Failed), so one shard's output file never has two writers. Exit codes 2
(usage) and 3 (the output belongs to another job, the input is missing) fail the Job at once; a
pod the scheduler preempted, or one evicted or drained (the DisruptionTarget condition), is
replaced without counting as a failure. A Spare job's pods run at the operator's spare
PriorityClass.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass
from typing import Any, ClassVar

from llmfleet import __version__
from llmfleet.models.batchjob import DEFAULT_BATCH_IMAGE, KIND, ClaimPath, LLMBatchJobSpec
from llmfleet.planner import Plan, PlanError
from llmfleet.render.compilecache import compile_cache_env
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.modelpod import (
    cache_and_tmp,
    model_env,
    pod_metadata,
    resources,
)
from llmfleet.render.names import MANAGED_BY, VERSION_LABEL, OwnerRef
from llmfleet.render.podspec import node_placement, pod_security_context
from llmfleet.shard_report import DEFAULT_GRACE_SECONDS, METRICS_PORT

BATCHJOB_LABEL = "llmfleet.dev/batchjob"
# Every kind an LLMBatchJob renders.
BATCH_KINDS: tuple[tuple[str, str], ...] = (("batch/v1", "Job"),)
COMPONENT_BATCH = "batch-runner"
CONTAINER = "runner"
RUNNER_COMMAND = ("python3", "-m", "llmfleet.batch.runner")
# llmfleet.batch.runner's exit codes that no retry can fix: usage (2) and configuration (3).
NON_RETRYABLE_EXIT_CODES = (2, 3)
CLAIMS_DIR = "/llmfleet/claims"
CONFIGMAP_INPUT_DIR = "/llmfleet/input"
CONFIGMAP_INPUT_FILE = "input.jsonl"
TERMINATION_LOG = "/dev/termination-log"
MAX_JOB_NAME = 52  # pod names add -<index>-<5 chars>; the Job name is also a label value


@dataclass(frozen=True)
class BatchOwner(OwnerRef):
    """The LLMBatchJob the Job belongs to."""

    kind: ClassVar[str] = KIND

    @property
    def identity(self) -> str:
        """What the runner records as the owner of the output directory."""
        return f"{self.namespace}/{self.name}"


def job_name(name: str) -> str:
    if len(name) <= MAX_JOB_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_JOB_NAME - 9].rstrip('-.')}-{digest}"


def labels(owner: BatchOwner) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "llmfleet-batch",
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": COMPONENT_BATCH,
        BATCHJOB_LABEL: owner.name,
    }


def shard_count(spec: LLMBatchJobSpec, plan: Plan) -> int:
    return spec.shards if spec.shards is not None else plan.replicas


def parallelism(spec: LLMBatchJobSpec, plan: Plan) -> int:
    """Shards at once: spec.parallelism, else every shard. More than the shards is refused here
    where the API server could not (spec.shards unset: the plan's replicas)."""
    shards = shard_count(spec, plan)
    if spec.parallelism is not None and spec.parallelism > shards:
        raise PlanError(
            "spec.parallelism",
            f"{spec.parallelism} shards at once is more than the job's {shards} shard(s) "
            f"(the planner's {plan.replicas} replica(s) for spec.gpus, spec.shards unset): a "
            "shard runs in one pod at a time. Set spec.shards to at least spec.parallelism, or "
            "lower it.",
            reason="ParallelismAboveShards",
        )
    return spec.parallelism or shards


def output_key(output: ClaimPath) -> tuple[str, str]:
    """Claim and normalised directory: two jobs with the same key would write the same files."""
    return output.claim_name, posixpath.normpath(output.path)


def image(spec: LLMBatchJobSpec) -> str:
    # Not the operator's default engine image: a batch pod runs the runner, which only the
    # LLMFleet vLLM image holds.
    return spec.engine.image or DEFAULT_BATCH_IMAGE


def _claim_mount(claim: str) -> str:
    return f"{CLAIMS_DIR}/{claim}"


def _volumes(spec: LLMBatchJobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str, str]:
    """Volumes, mounts, the input file and the output directory as the container sees them."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    output = spec.output.persistent_volume_claim
    source = spec.input.persistent_volume_claim
    claims = [output.claim_name]
    if source is not None and source.claim_name not in claims:
        claims.append(source.claim_name)
    for i, claim in enumerate(claims):
        read_only = claim != output.claim_name
        volumes.append(
            {
                "name": f"claim-{i}",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only},
            }
        )
        mounts.append(
            {"name": f"claim-{i}", "mountPath": _claim_mount(claim), "readOnly": read_only}
        )
    if source is not None:
        input_path = posixpath.join(_claim_mount(source.claim_name), source.path)
    else:
        assert spec.input.config_map is not None
        ref = spec.input.config_map
        volumes.append(
            {
                "name": "input",
                "configMap": {
                    "name": ref.name,
                    "items": [{"key": ref.key, "path": CONFIGMAP_INPUT_FILE}],
                },
            }
        )
        mounts.append({"name": "input", "mountPath": CONFIGMAP_INPUT_DIR, "readOnly": True})
        input_path = f"{CONFIGMAP_INPUT_DIR}/{CONFIGMAP_INPUT_FILE}"
    cache_volumes, cache_mounts = cache_and_tmp(spec.model)
    volumes += cache_volumes
    mounts += cache_mounts
    return volumes, mounts, input_path, posixpath.join(_claim_mount(output.claim_name), output.path)


def _env(spec: LLMBatchJobSpec, plan: Plan) -> list[dict[str, Any]]:
    env = model_env(spec.model, spec.engine, on_gpus=spec.gpus is not None)
    env += compile_cache_env(spec.model, spec.engine, spec.gpus, image(spec), plan.vllm_args)
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    return sorted(env, key=lambda e: str(e["name"]))


def runner_args(
    owner: BatchOwner, spec: LLMBatchJobSpec, plan: Plan, input_path: str, output_dir: str
) -> list[str]:
    return [
        "--input",
        input_path,
        "--output-dir",
        output_dir,
        "--shards",
        str(shard_count(spec, plan)),
        "--job",
        owner.identity,
        "--defaults",
        json.dumps(spec.defaults.as_body(), sort_keys=True, separators=(",", ":")),
        "--max-retries-per-line",
        str(spec.max_retries_per_line),
        "--host",
        "0.0.0.0",
        "--metrics-port",
        str(METRICS_PORT),
        "--termination-log",
        TERMINATION_LOG,
        # The runner assumes the default grace period; the flag only when it differs keeps the
        # Job of a spec that leaves it unset as it rendered before the flag existed.
        *(
            ["--grace-seconds", str(spec.termination_grace_period_seconds)]
            if spec.termination_grace_period_seconds != DEFAULT_GRACE_SECONDS
            else []
        ),
        # The offline engine's EngineArgs take the model as --model (no positional).
        "--model",
        spec.model.name,
        *plan.vllm_args,
    ]


class SpareClassUnsetError(ValueError):
    """A Spare job rendered without the spare PriorityClass it must run at."""


def render_batch_job(
    owner: BatchOwner, spec: LLMBatchJobSpec, plan: Plan, fleet: FleetDefaults
) -> dict[str, Any]:
    """The Job; `fleet.spare_priority_class` (the operator's --spare-priority-class) is the class
    a Spare job's pods run at, and such a job cannot render without one. The image is not the
    fleet's engine image (`image` says why)."""
    spare_priority_class = fleet.spare_priority_class
    if spec.priority == "Spare" and not spare_priority_class:
        raise SpareClassUnsetError("spec.priority Spare needs a spare PriorityClass")
    shards = shard_count(spec, plan)
    volumes, mounts, input_path, output_dir = _volumes(spec)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image(spec),
        "command": list(RUNNER_COMMAND),
        "args": runner_args(owner, spec, plan, input_path, output_dir),
        "env": _env(spec, plan),
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": resources(spec.engine, plan),
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if plan.gpus_per_replica > 1:
        # NCCL exchanges through /dev/shm between the tensor-parallel workers.
        volumes.append(
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{plan.shm_size_gib}Gi"},
            }
        )
        container["volumeMounts"] = [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}]
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(fs_group=True),
    }
    pod_spec.update(node_placement(plan))
    if spec.priority == "Spare":
        pod_spec["priorityClassName"] = spare_priority_class
    pod_labels = labels(owner)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(owner.name),
            "namespace": owner.namespace,
            # The release on the Job only: its pods carry the labels they select by.
            "labels": {**pod_labels, VERSION_LABEL: __version__},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": shards,
            "parallelism": parallelism(spec, plan),
            "backoffLimitPerIndex": spec.max_restarts_per_shard,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": list(NON_RETRYABLE_EXIT_CODES),
                        },
                    },
                    # Preemption, eviction and node drains are not the shard's fault: the pod
                    # is replaced without counting against backoffLimitPerIndex.
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {
                "metadata": pod_metadata(
                    spec.engine,
                    pod_labels,
                    {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                ),
                "spec": pod_spec,
            },
        },
    }
