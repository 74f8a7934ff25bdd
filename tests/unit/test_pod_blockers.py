"""Every reason the scheduler and the kubelet give for a pod that cannot run reaches status: named
by the spec field behind it when there is one, quoted otherwise, never dropped, and gone once the
pods no longer say it. Pods as the API server holds them, with the words Kubernetes writes."""

from __future__ import annotations

from typing import Any

import pytest
from batchstatusfakes import PLAN as BATCH_PLAN
from batchstatusfakes import job
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from stuckpods import crash_looping, failed, running, unschedulable, waiting, with_volumes

from llmfleet.models import LLMBatchJobStatus, LLMDeploymentSpec
from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.models.status import LLMDeploymentStatus
from llmfleet.planner import plan
from llmfleet.reconcile.llmbatchjob.batchstatus import batch_status, observe_shards
from llmfleet.reconcile.llmdeployment.status import Observed, ready_status
from llmfleet.reconcile.machinery.pod_blockers import blockers
from llmfleet.reconcile.machinery.references import batch_references, deployment_references
from llmfleet.render.batchjob import CONTAINER as BATCH_CONTAINER

DEPLOYMENT = LLMDeploymentSpec.model_validate(
    {
        "model": {
            "name": "org/tiny",
            "architecture": TINY_ARCHITECTURE,
            "cache": {"claimName": "model-cache"},
        },
        "gpus": {"count": 1, "memoryGiB": 80, "product": "NVIDIA-B300"},
        "engine": {"maxModelLen": 512},
    }
)
BATCH = LLMBatchJobSpec.model_validate(
    {
        "model": {"name": "org/tiny", "architecture": TINY_ARCHITECTURE},
        "gpus": {"count": 1, "memoryGiB": 80},
        "engine": {"maxModelLen": 512},
        "input": {"configMap": {"name": "prompts", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "results", "path": "out"}},
    }
)
REFS = deployment_references(DEPLOYMENT, plan(DEPLOYMENT))
BATCH_REFS = batch_references(BATCH, plan(BATCH.deployment_spec()))
PREEMPTION = " preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
CACHE_VOLUME = {"persistentVolumeClaim": {"claimName": "model-cache"}}
ENGINE_LOG = (
    "INFO 11-27 10:00:00 [api_server.py:1] vLLM API server version 0.32\n"
    "ERROR 11-27 10:00:07 [core.py:88] ValueError: Model architectures ['Nope'] are not supported"
)


IMAGE = "vllm/vllm-openai:v9"  # stuckpods.waiting's
SHIM = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "runc create failed: unable to start container process: error during container init"
)
NO_VLLM = 'exec: "vllm": executable file not found in $PATH'
NO_PY = 'exec: "python3": executable file not found in $PATH'
CRIO_NO_VLLM = "executable file `vllm` not found in $PATH"


def batch_shard(pod: dict[str, Any]) -> dict[str, Any]:
    pod["status"]["containerStatuses"][0]["name"] = BATCH_CONTAINER
    return pod


def pending_with(message: str, **spec: Any) -> dict[str, Any]:
    pod = unschedulable(message)
    pod["spec"] = {"containers": [{"name": "vllm"}], **spec}
    return pod


def mounting(**volumes: dict[str, Any]) -> dict[str, Any]:
    return with_volumes(waiting("ContainerCreating"), **volumes)


# (pod, volume Events said of it, references) -> (field, reason, what the cause says)
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...], Any, tuple[str, str, str]]] = {
    "image-pull-back-off": (
        waiting("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v9"'),
        (),
        REFS,
        ("spec.engine.image", "EngineImagePullFailed", 'cannot pull image "vllm/vllm-openai:v9"'),
    ),
    "invalid-image-name": (
        waiting("InvalidImageName", 'failed to apply default image tag "Vllm:latest"'),
        (),
        REFS,
        ("spec.engine.image", "EngineImagePullFailed", "failed to apply default image tag"),
    ),
    "batch-image": (
        waiting("ErrImagePull", "not found", container=BATCH_CONTAINER),
        (),
        BATCH_REFS,
        ("spec.engine.image", "EngineImagePullFailed", 'cannot pull image "vllm/vllm-openai:v9"'),
    ),
    "container-config-error-of-no-reference": (
        waiting("CreateContainerConfigError", "services have not yet been read at least once"),
        (),
        REFS,
        ("", "CreateContainerConfigError", "services have not yet been read at least once"),
    ),
    "create-container-error": (
        waiting("CreateContainerError", 'failed to reserve container name "vllm_p-0"'),
        (),
        REFS,
        ("", "CreateContainerError", 'container vllm: failed to reserve container name "vllm_p-0"'),
    ),
    "run-container-error-of-the-node": (
        waiting("RunContainerError", "failed to create shim task: context deadline exceeded"),
        (),
        REFS,
        ("", "RunContainerError", "container vllm: failed to create shim task: context deadline"),
    ),
    "command-not-in-the-engine-image": (
        waiting("RunContainerError", f"{SHIM}: {NO_VLLM}: unknown"),
        (),
        REFS,
        ("spec.engine.image", "EngineImageStartFailed", f'vllm cannot start in image "{IMAGE}"'),
    ),
    "command-not-in-the-image-crash-loop": (
        crash_looping("StartError", 128, f"{SHIM}: {NO_VLLM}: unknown"),
        (),
        REFS,
        ("spec.engine.image", "EngineImageStartFailed", NO_VLLM),
    ),
    "command-not-in-the-image-cri-o": (
        waiting("CreateContainerError", f"{CRIO_NO_VLLM}: No such file or directory"),
        (),
        REFS,
        ("spec.engine.image", "EngineImageStartFailed", CRIO_NO_VLLM),
    ),
    "image-of-another-platform": (
        crash_looping("StartError", 128, f"{SHIM}: exec format error: unknown"),
        (),
        REFS,
        ("spec.engine.image", "EngineImageStartFailed", "exec format error"),
    ),
    "batch-shard-whose-command-is-not-in-the-image": (
        batch_shard(
            failed(
                terminated={
                    "reason": "StartError",
                    "exitCode": 128,
                    "message": f"{SHIM}: {NO_PY}: unknown",
                }
            )
        ),
        (),
        BATCH_REFS,
        ("spec.engine.image", "EngineImageStartFailed", f"container runner cannot start: {NO_PY}"),
    ),
    "a-reason-no-one-listed-is-quoted-as-is": (
        waiting("SomeFutureKubeletReason", "the node said no"),
        (),
        REFS,
        ("", "SomeFutureKubeletReason", "container vllm: the node said no"),
    ),
    "crash-loop-with-the-engines-last-log-line": (
        crash_looping("Error", 1, ENGINE_LOG),
        (),
        REFS,
        (
            "",
            "EngineCrashLoop",
            "container vllm keeps exiting (last: Error, exit code 1): ValueError: Model arch",
        ),
    ),
    "crash-loop-out-of-gpu-memory-says-what-to-change": (
        crash_looping("Error", 1, "torch.OutOfMemoryError: CUDA out of memory."),
        (),
        REFS,
        ("", "EngineCrashLoop", "quantize to fp8 (spec.model.quantization)"),
    ),
    "oom-killed-in-a-crash-loop": (
        crash_looping("OOMKilled", 137),
        (),
        REFS,
        (
            "spec.engine.resources",
            "EngineOOMKilled",
            "keeps exiting (last: OOMKilled, exit code 137)",
        ),
    ),
    "oom-killed-batch-shard-that-does-not-restart": (
        failed(terminated={"reason": "OOMKilled", "exitCode": 137}),
        (),
        REFS,
        ("spec.engine.resources", "EngineOOMKilled", "exited (OOMKilled, exit code 137)"),
    ),
    "evicted-over-its-memory-request": (
        failed(
            "Evicted",
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
            "Container vllm was using 30Gi, request is 16Gi, has larger consumption of memory "
            "which exceeds its request of 16Gi.",
        ),
        (),
        REFS,
        ("spec.engine.resources", "Evicted", "The node was low on resource: memory."),
    ),
    "evicted-for-the-node": (
        failed("Evicted", "The node had condition: [DiskPressure]. "),
        (),
        REFS,
        ("", "Evicted", "The node had condition: [DiskPressure]."),
    ),
    "refused-by-the-kubelets-admission": (
        failed("OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu"),
        (),
        REFS,
        ("", "OutOfnvidiacomgpu", "Node didn't have enough resource: nvidia.com/gpu"),
    ),
    "gpus-in-use": (
        pending_with(
            "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match "
            "Pod's node affinity/selector." + PREEMPTION
        ),
        (),
        REFS,
        (
            "",
            "InsufficientGPUs",
            "Insufficient nvidia.com/gpu, node(s) didn't match Pod's node affinity/selector",
        ),
    ),
    "memory-no-node-has": (
        pending_with("0/3 nodes are available: 3 Insufficient memory." + PREEMPTION),
        (),
        REFS,
        ("spec.engine.resources", "InsufficientResources", "Insufficient memory"),
    ),
    "taints-no-toleration-matches": (
        pending_with(
            "0/2 nodes are available: 2 node(s) had untolerated taint {gpu: reserved}." + PREEMPTION
        ),
        (),
        REFS,
        ("spec.gpus.profile", "UntoleratedTaint", "node(s) had untolerated taint {gpu: reserved}"),
    ),
    "claim-no-volume-can-bind": (
        pending_with(
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
            + PREEMPTION,
            volumes=[{"name": "cache", **CACHE_VOLUME}],
        ),
        (),
        REFS,
        (
            "spec.model.cache.claimName",
            "ModelCacheClaimUnbound",
            "pod has unbound immediate PersistentVolumeClaims",
        ),
    ),
    "claim-no-volume-can-bind-as-the-lab-scheduler-says-it": (
        pending_with(
            "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found.",
            volumes=[{"name": "cache", **CACHE_VOLUME}],
        ),
        (),
        REFS,
        (
            "spec.model.cache.claimName",
            "ModelCacheClaimUnbound",
            "pod has unbound immediate PersistentVolumeClaims",
        ),
    ),
    "cpu-no-node-has-beside-what-post-filters-said": (
        pending_with(
            "0/6 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu, 3 "
            "node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, "
            "preemption: 0/6 nodes are available: 2 No preemption victims found for incoming "
            "pod, 4 Preemption is not helpful for scheduling."
        ),
        (),
        REFS,
        (
            "spec.engine.resources",
            "InsufficientResources",
            "Insufficient cpu, node(s) didn't match Pod's node affinity/selector, node(s) had "
            "untolerated taint(s)",
        ),
    ),
    "scheduler-reason-no-one-listed": (
        pending_with(
            "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod "
            "ports." + PREEMPTION
        ),
        (),
        REFS,
        ("", "Unschedulable", "node(s) didn't have free ports for the requested pod ports"),
    ),
    "claim-that-does-not-mount": (
        mounting(cache=CACHE_VOLUME),
        (
            "Unable to attach or mount volumes: unmounted volumes=[cache], unattached volumes="
            "[kube-api-access-x cache]: timed out waiting for the condition",
        ),
        REFS,
        ("spec.model.cache.claimName", "ModelCacheClaimMountFailed", "unmounted volumes=[cache]"),
    ),
    "volume-that-does-not-attach": (
        mounting(cache=CACHE_VOLUME),
        ('AttachVolume.Attach failed for volume "pvc-1f2e" : rpc error: disk is in use',),
        REFS,
        ("", "FailedAttachVolume", "rpc error: disk is in use"),
    ),
}


@pytest.mark.parametrize(("pod", "said", "refs", "expected"), CASES.values(), ids=CASES.keys())
def test_each_reason_a_pod_cannot_run_is_named_by_field_or_quoted(
    pod: dict[str, Any], said: tuple[str, ...], refs: Any, expected: tuple[str, str, str]
) -> None:
    found = blockers([pod], refs, {"p-0": said})
    assert len(found) == 1, found
    field, reason, cause = expected
    assert (found[0].field, found[0].reason) == (field, reason)
    assert cause in found[0].cause
    assert found[0].pod == "p-0"
    if found[0].reason.endswith(("Unbound", "InsufficientResources")):
        assert found[0].cause == cause  # nothing but the nodes' reasons


def deleting(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return pod


NOT_A_CAUSE = {
    "creating-with-nothing-said": [waiting("ContainerCreating")],
    "initializing": [waiting("PodInitializing")],
    "running": [running("p-0")],
    "evicted-but-its-replacement-runs": [failed("Evicted", "The node had condition"), running()],
    "being-deleted": [deleting(waiting("ErrImagePull", "manifest unknown"))],
}


@pytest.mark.parametrize("pods", NOT_A_CAUSE.values(), ids=NOT_A_CAUSE.keys())
def test_a_pod_on_its_way_or_replaced_is_no_cause(pods: list[dict[str, Any]]) -> None:
    assert blockers(pods, REFS, {}) == []


def restarted(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` between two back-offs: its container started again, not ready yet."""
    pod["status"]["containerStatuses"][0]["state"] = {"running": {"startedAt": "2026-01-01"}}
    return pod


def test_the_same_crash_reads_the_same_on_every_restart() -> None:
    later = ENGINE_LOG.replace("10:00:07", "10:03:41")
    backing_off = blockers([crash_looping("Error", 1, ENGINE_LOG)], REFS)
    started_again = blockers([restarted(crash_looping("Error", 1, later))], REFS)
    assert len(backing_off) == len(started_again) == 1
    assert backing_off[0].summary == started_again[0].summary
    assert backing_off[0].said_by == started_again[0].said_by


PULL_ERROR = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/x/y:1": '
    'failed to resolve reference "docker.io/x/y:1": docker.io/x/y:1: not found'
)


def test_a_failed_pull_reads_the_same_between_pulls_and_during_the_back_off() -> None:
    """A kubelet since 1.32 repeats the last pull's error in its back-off message."""
    backing_off = f'Back-off pulling image "x/y:1": ErrImagePull: {PULL_ERROR}'
    pulled = blockers([waiting("ErrImagePull", PULL_ERROR)], REFS)
    waited = blockers([waiting("ImagePullBackOff", backing_off)], REFS)
    assert len(pulled) == len(waited) == 1
    assert pulled[0].summary == waited[0].summary
    assert "not found" in waited[0].summary


def deployment_status(pods: list[dict[str, Any]], ready: int) -> dict[str, tuple[str, str, str]]:
    st = ready_status(
        old=LLMDeploymentStatus(),
        generation=1,
        plan=plan(DEPLOYMENT),
        observed=Observed(
            engine={"status": {"replicas": 1, "readyReplicas": ready, "updatedReplicas": 1}},
            old_engines=(),
            hpa=None,
            pods=tuple(pods),
            blockers=tuple(blockers(pods, REFS)),
        ),
        endpoint="http://x",
    )
    return {c.type: (c.status, c.reason, c.message) for c in st.conditions}


def test_a_deployment_names_the_cause_and_clears_it_when_the_pod_runs() -> None:
    stuck = deployment_status([crash_looping("OOMKilled", 137)], ready=0)
    for ctype, status in (("Available", "False"), ("Degraded", "True")):
        assert stuck[ctype][:2] == (status, "EngineOOMKilled")
        assert (
            "spec.engine.resources: container vllm keeps exiting (last: OOMKilled"
            in stuck[ctype][2]
        )
    fixed = deployment_status([running("p-0")], ready=1)
    assert fixed["Available"][:2] == ("True", "EnginesReady")
    assert fixed["Degraded"][:2] == ("False", "AsPlanned")


def batch_running(pods: list[dict[str, Any]]) -> tuple[str, str, str]:
    refs = batch_references(BATCH, plan(BATCH.deployment_spec()))
    st = batch_status(
        old=LLMBatchJobStatus(),
        generation=1,
        planned=BATCH_PLAN,
        shards=2,
        job=job(),
        observed=observe_shards(2, [], set(), set(), lambda _ip: None, {}),
        blockers=blockers(pods, refs),
    )
    c = next(c for c in st.conditions if c.type == "Running")
    return c.status, c.reason, c.message


def test_a_batch_job_names_why_its_shards_cannot_start() -> None:
    stuck = waiting("RunContainerError", "exec format error", container=BATCH_CONTAINER)
    status, reason, message = batch_running([stuck])
    assert (status, reason) == ("False", "EngineImageStartFailed")
    assert (
        'the others cannot start: spec.engine.image: container runner cannot start in image "vllm'
        in message
    )
    stuck = waiting("RunContainerError", "context deadline exceeded", container=BATCH_CONTAINER)
    status, reason, message = batch_running([stuck])
    assert (status, reason) == ("False", "RunContainerError")
    assert "the others cannot start: container runner: context deadline exceeded" in message
