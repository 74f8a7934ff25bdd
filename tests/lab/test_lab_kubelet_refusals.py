"""The lab's nodes refuse a pod whose Secret or ConfigMap is missing with the kubelet's words
(dev/localcluster/podrefs.py), and kwok starts only the pods the kwok gate admitted."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pytest
import yaml
from localcluster import podrefs
from localcluster.kwokgate import ADMITTED, RUNS_UNTIL_DELETED, gated_stages

EXISTING: dict[tuple[str, str], set[str]] = {
    ("secret", "hf-token"): {"token"},
    ("configmap", "prompts"): {"in.jsonl"},
}


def lookup(kind: str, namespace: str, name: str) -> Collection[str] | None:
    return EXISTING.get((kind, name))


def pod(
    *, env: tuple[dict[str, Any], ...] = (), volumes: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "containers": [{"name": "vllm", "image": "x", "env": list(env)}],
            "volumes": list(volumes),
        },
    }


def secret_env(name: str, key: str = "token", **extra: Any) -> dict[str, Any]:
    return {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": key, **extra}}}


def configmap_volume(name: str, key: str = "in.jsonl") -> dict[str, Any]:
    return {"name": "input", "configMap": {"name": name, "items": [{"key": key, "path": "f"}]}}


CASES = {
    "secret-missing": (
        pod(env=(secret_env("nope"),)),
        ("CreateContainerConfigError", 'secret "nope" not found', "Failed"),
    ),
    "secret-key-missing": (
        pod(env=(secret_env("hf-token", key="other"),)),
        ("CreateContainerConfigError", "couldn't find key other in Secret ns/hf-token", "Failed"),
    ),
    "configmap-volume-missing": (
        pod(volumes=(configmap_volume("nope"),)),
        ("ContainerCreating", "", "FailedMount"),
    ),
    "configmap-item-missing": (
        pod(volumes=(configmap_volume("prompts", key="other"),)),
        ("ContainerCreating", "", "FailedMount"),
    ),
}


@pytest.mark.parametrize(("p", "expected"), CASES.values(), ids=CASES.keys())
def test_a_missing_object_is_refused_as_a_kubelet_refuses_it(
    p: dict[str, Any], expected: tuple[str, str, str]
) -> None:
    refused = podrefs.check(p, lookup)
    assert refused is not None
    assert (refused.waiting_reason, refused.waiting_message, refused.event_reason) == expected
    status = podrefs.waiting_status(p, refused)
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == expected[0]


def test_the_mount_event_quotes_the_volume_and_the_object() -> None:
    refused = podrefs.check(pod(volumes=(configmap_volume("nope"),)), lookup)
    assert refused is not None
    event = podrefs.event(pod(), refused, "kwok-node-0")
    assert event["message"] == (
        'MountVolume.SetUp failed for volume "input" : configmap "nope" not found'
    )
    assert (event["type"], event["source"]["component"]) == ("Warning", "kubelet")


@pytest.mark.parametrize(
    "p",
    [
        pod(env=(secret_env("hf-token"),), volumes=(configmap_volume("prompts"),)),
        pod(env=(secret_env("nope", optional=True),)),
    ],
    ids=["everything-exists", "optional-secret-missing"],
)
def test_a_pod_whose_references_exist_starts(p: dict[str, Any]) -> None:
    assert podrefs.check(p, lookup) is None


def test_kwok_starts_only_admitted_pods_and_keeps_marked_job_pods_until_deleted() -> None:
    upstream = yaml.safe_dump_all(
        [
            {"kind": "Stage", "metadata": {"name": "pod-delete"}, "spec": {"selector": {}}},
            {
                "kind": "Stage",
                "metadata": {"name": "pod-ready"},
                "spec": {"selector": {"matchExpressions": [{"key": ".status.phase"}]}},
            },
            {
                "kind": "Stage",
                "metadata": {"name": "pod-complete"},
                "spec": {"selector": {"matchExpressions": [{"key": ".status.phase"}]}},
            },
        ]
    )
    stages = {d["metadata"]["name"]: d for d in yaml.safe_load_all(gated_stages(upstream))}
    keys = [e["key"] for e in stages["pod-ready"]["spec"]["selector"]["matchExpressions"]]
    assert keys == [".status.phase", f'.metadata.annotations["{ADMITTED}"]']
    # A Job's pod so annotated stays Running until deleted (bench/spare_day.py's spare shards),
    # then stops as the batch runner does, then goes.
    spared = {"key": f'.metadata.annotations["{RUNS_UNTIL_DELETED}"]', "operator": "DoesNotExist"}
    assert stages["pod-complete"]["spec"]["selector"]["matchExpressions"][-1] == spared
    assert stages["pod-delete"]["spec"]["selector"]["matchExpressions"] == [spared]
    stop, gone = stages["pod-stop-until-deleted"], stages["pod-delete-until-deleted"]
    assert "phase: Failed" in stop["spec"]["next"]["statusTemplate"]
    assert "exitCode: 143" in stop["spec"]["next"]["statusTemplate"]
    assert gone["spec"]["next"] == {"delete": True}
