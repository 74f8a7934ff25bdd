"""What the scheduler and the kubelet say about a pod that cannot run reaches status attributed to
the spec field that named the missing object: pure functions over pods as the API server holds
them, with the exact strings Kubernetes writes."""

from __future__ import annotations

from typing import Any

import pytest
from localcluster.metricsstack.load import TINY_ARCHITECTURE
from stuckpods import unschedulable, waiting

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.models.status import LLMDeploymentStatus
from llmfleet.planner import plan
from llmfleet.reconcile.llmdeployment.status import Observed, ready_status
from llmfleet.reconcile.machinery.causes import Blocker, newly_blocked
from llmfleet.reconcile.machinery.pod_blockers import blockers, mount_pending
from llmfleet.reconcile.machinery.references import batch_references, deployment_references

ARCH = TINY_ARCHITECTURE
DEPLOYMENT = LLMDeploymentSpec.model_validate(
    {
        "model": {
            "name": "org/tiny",
            "architecture": ARCH,
            "tokenSecretRef": {"name": "hf-token", "key": "token"},
            "cache": {"claimName": "model-cache"},
        },
        "gpus": {"count": 1, "memoryGiB": 80, "product": "NVIDIA-B300"},
        "engine": {"apiKeySecretRef": {"name": "api-keys", "key": "key"}, "maxModelLen": 512},
    }
)
BATCH = LLMBatchJobSpec.model_validate(
    {
        "model": {"name": "org/tiny", "architecture": ARCH},
        "gpus": {"count": 1, "memoryGiB": 80, "product": "NVIDIA-B300"},
        "engine": {"maxModelLen": 512},
        "input": {"configMap": {"name": "prompts", "key": "in.jsonl"}},
        "output": {"persistentVolumeClaim": {"claimName": "results", "path": "out"}},
    }
)
DEPLOYMENT_REFS = deployment_references(DEPLOYMENT, plan(DEPLOYMENT))
BATCH_REFS = batch_references(BATCH, plan(BATCH.deployment_spec()))


PREEMPTION = " preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
# (pod, FailedMount messages, references) -> (field, reason, cause)
CASES = {
    "missing-model-cache-claim": (
        unschedulable(
            '0/4 nodes are available: persistentvolumeclaim "model-cache" not found.' + PREEMPTION
        ),
        (),
        DEPLOYMENT_REFS,
        (
            "spec.model.cache.claimName",
            "ModelCacheClaimNotFound",
            'persistentvolumeclaim "model-cache" not found',
        ),
    ),
    "missing-token-secret": (
        waiting("CreateContainerConfigError", 'secret "hf-token" not found'),
        (),
        DEPLOYMENT_REFS,
        ("spec.model.tokenSecretRef", "TokenSecretNotFound", 'secret "hf-token" not found'),
    ),
    "missing-key-of-the-api-key-secret": (
        waiting("CreateContainerConfigError", "couldn't find key key in Secret ns/api-keys"),
        (),
        DEPLOYMENT_REFS,
        (
            "spec.engine.apiKeySecretRef",
            "APIKeySecretKeyNotFound",
            "couldn't find key key in Secret ns/api-keys",
        ),
    ),
    "no-node-has-the-gpu": (
        unschedulable(
            "0/4 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, "
            "3 node(s) didn't match Pod's node affinity/selector." + PREEMPTION
        ),
        (),
        DEPLOYMENT_REFS,
        (
            "spec.gpus.product",
            "GPUProductNotFound",
            "no node carries nvidia.com/gpu.product=NVIDIA-B300 "
            "(node(s) didn't match Pod's node affinity/selector)",
        ),
    ),
    "image-that-cannot-be-pulled": (
        waiting("ErrImagePull", "manifest unknown"),
        (),
        DEPLOYMENT_REFS,
        (
            "spec.engine.image",
            "EngineImagePullFailed",
            'cannot pull image "vllm/vllm-openai:v9": manifest unknown',
        ),
    ),
    "missing-input-configmap": (
        waiting("ContainerCreating", container="runner"),
        (
            'MountVolume.SetUp failed for volume "input" : configmap "prompts" not found',
            'MountVolume.SetUp failed for volume "input" : configmap "prompts" not found',
        ),
        BATCH_REFS,
        ("spec.input.configMap", "InputConfigMapNotFound", 'configmap "prompts" not found'),
    ),
    "input-configmap-without-the-key": (
        waiting("ContainerCreating", container="runner"),
        (
            'MountVolume.SetUp failed for volume "input" : configmap references non-existent '
            "config key: in.jsonl",
        ),
        BATCH_REFS,
        (
            "spec.input.configMap",
            "InputConfigMapKeyNotFound",
            "configmap references non-existent config key: in.jsonl",
        ),
    ),
    "missing-output-claim": (
        unschedulable('0/4 nodes are available: persistentvolumeclaim "results" not found.'),
        (),
        BATCH_REFS,
        (
            "spec.output.persistentVolumeClaim",
            "OutputClaimNotFound",
            'persistentvolumeclaim "results" not found',
        ),
    ),
}


@pytest.mark.parametrize(("pod", "mounts", "refs", "expected"), CASES.values(), ids=CASES.keys())
def test_a_missing_object_is_named_with_the_field_behind_it(
    pod: dict[str, Any], mounts: tuple[str, ...], refs: Any, expected: tuple[str, str, str]
) -> None:
    found = blockers([pod], refs, {"p-0": mounts})
    assert [(b.field, b.reason, b.cause) for b in found] == [expected]


NOT_A_MISSING_REFERENCE = {
    "gpus-in-use": unschedulable(
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's "
        "node affinity/selector." + PREEMPTION
    ),
    "starting": waiting("ContainerCreating"),
    "running": {
        "metadata": {"name": "p-0"},
        "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
    },
}


@pytest.mark.parametrize("pod", NOT_A_MISSING_REFERENCE.values(), ids=NOT_A_MISSING_REFERENCE)
def test_a_pod_that_waits_for_capacity_or_starts_is_not_blamed_on_a_field(
    pod: dict[str, Any],
) -> None:
    # A GPU shortage is still reported (quoted, pod_blockers), but as capacity, not a field.
    assert [b.field for b in blockers([pod], DEPLOYMENT_REFS, {}) if b.field] == []


def test_only_a_pod_waiting_for_its_volumes_has_its_mount_events_read() -> None:
    assert mount_pending(waiting("ContainerCreating"))
    assert not mount_pending(waiting("CreateContainerConfigError", 'secret "x" not found'))
    assert not mount_pending(unschedulable("0/1 nodes are available"))


def test_each_cause_is_announced_once_while_it_lasts() -> None:
    said = ("spec.model.tokenSecretRef", "TokenSecretNotFound", 'secret "a" not found', "kubelet")
    one, other = Blocker(*said, pod="p-0"), Blocker(*said, pod="p-1")
    assert newly_blocked("", [one, other]) == [one]  # two pods, one cause
    assert newly_blocked(f"{one.summary} (kubelet; pod p-0)", [other]) == []


def status_with(pods: list[dict[str, Any]]) -> LLMDeploymentStatus:
    planned = plan(DEPLOYMENT)
    return ready_status(
        old=LLMDeploymentStatus(),
        generation=1,
        plan=planned,
        observed=Observed(
            engine={"status": {"replicas": 1}},
            old_engines=(),
            hpa=None,
            pods=tuple(pods),
            blockers=tuple(blockers(pods, DEPLOYMENT_REFS)),
        ),
        endpoint="http://x",
    )


def test_status_says_which_field_keeps_the_engine_from_starting() -> None:
    st = status_with([waiting("CreateContainerConfigError", 'secret "hf-token" not found')])
    conds = {c.type: c for c in st.conditions}
    assert (conds["Available"].status, conds["Available"].reason) == (
        "False",
        "TokenSecretNotFound",
    )
    assert 'spec.model.tokenSecretRef: secret "hf-token" not found' in conds["Available"].message
    assert conds["Degraded"].reason == "TokenSecretNotFound"


def test_an_unschedulable_pod_names_the_missing_claim_instead_of_no_node_matches() -> None:
    st = status_with(
        [unschedulable('0/4 nodes are available: persistentvolumeclaim "model-cache" not found.')]
    )
    limited = next(c for c in st.conditions if c.type == "ScalingLimited")
    assert "no node matches" not in limited.message
    assert 'spec.model.cache.claimName: persistentvolumeclaim "model-cache" not found' in (
        limited.message
    )
