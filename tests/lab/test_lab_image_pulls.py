"""The lab's nodes pull only the images they were given, as an air-gapped node does, and refuse
every other image with the kubelet's waiting reasons, messages and Events
(dev/localcluster/imagepull.py; the kwok gate and the node runner both ask it)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kwokgate_fakes import FakeCore
from localcluster import imagepull, kwokgate, podrefs
from localcluster.noderunner.container import container_status
from localcluster.noderunner.images import REF_ANNOTATION
from podworkers import pod_worker

from llmfleet.models import DEFAULT_BATCH_IMAGE, DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE, DEFAULT_ROUTER_HOP_IMAGE
from llmfleet.models.router import DEFAULT_ROUTER_IMAGE

BUILT = "docker.io/llmfleet/operator:0.2.0"
BUILT_DIGEST = "sha256:" + "ab" * 32
MISSING = "docker.io/llmfleet/no-such-engine:1"


@pytest.fixture
def held(tmp_path: Path) -> frozenset[str]:
    """What a node holds with one image built by `make images` (an archive in tmp_path)."""
    index = {"manifests": [{"digest": BUILT_DIGEST, "annotations": {REF_ANNOTATION: BUILT}}]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    with tarfile.open(tmp_path / "operator.oci.tar", "w") as tar:
        tar.add(tmp_path / "index.json", arcname="index.json")
    return imagepull.held_images(tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(image: str, policy: str | None = None, **container: Any) -> dict[str, Any]:
    c = {"name": "vllm", "image": image, **container}
    if policy:
        c["imagePullPolicy"] = policy
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [c]},
    }


def puller(held: Collection[str], clock: Clock | None = None) -> imagepull.Puller:
    return imagepull.Puller(lambda: held, clock or Clock())


def decide(held: Collection[str], image: str, policy: str | None = None) -> str | None:
    p = pod(image, policy)
    refused = puller(held).check(p, p["spec"]["containers"][0])
    return None if refused is None else refused.waiting_reason


DECISIONS = {
    "default-engine-image": (DEFAULT_ENGINE_IMAGE, None, None),
    "default-batch-image": (DEFAULT_BATCH_IMAGE, None, None),
    "default-router-image": (DEFAULT_ROUTER_IMAGE, None, None),
    "default-fetcher-image": (DEFAULT_FETCHER_IMAGE, None, None),
    "default-router-hop-image": (DEFAULT_ROUTER_HOP_IMAGE, None, None),
    "built-image": (BUILT, None, None),
    "built-image-short-name": ("llmfleet/operator:0.2.0", None, None),
    "built-image-by-digest": (f"docker.io/llmfleet/operator@{BUILT_DIGEST}", None, None),
    "built-image-tag-and-digest": (f"{BUILT}@{BUILT_DIGEST}", None, None),
    "lab-image-short-name-no-tag": ("busybox", None, None),
    "lab-image-in-full": ("docker.io/library/busybox:latest", None, None),
    "held-image-pull-never": (DEFAULT_ENGINE_IMAGE, "Never", None),
    "held-image-pull-always": (DEFAULT_ENGINE_IMAGE, "Always", None),
    "image-no-node-holds": (MISSING, None, "ErrImagePull"),
    "held-repository-other-tag": ("vllm/vllm-openai:v9.9.9", "IfNotPresent", "ErrImagePull"),
    "built-repository-other-digest": (
        f"docker.io/llmfleet/operator@sha256:{'cd' * 32}",
        None,
        "ErrImagePull",
    ),
    "image-no-node-holds-pull-never": (MISSING, "Never", "ErrImageNeverPull"),
    "uppercase-repository": ("vllm/VLLM-openai:v1", None, "InvalidImageName"),
    "empty-tag": ("vllm/vllm-openai:", None, "InvalidImageName"),
    "spaces": ("vllm openai", None, "InvalidImageName"),
}


@pytest.mark.parametrize(("image", "policy", "reason"), DECISIONS.values(), ids=DECISIONS.keys())
def test_a_node_starts_only_images_it_holds_and_names_why_not(
    held: frozenset[str], image: str, policy: str | None, reason: str | None
) -> None:
    assert decide(held, image, policy) == reason


def events_of(p: dict[str, Any], refused: podrefs.Refusal) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in podrefs.events(p, refused, "kwok-0")]


NOT_FOUND = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "{name}": '
    'failed to resolve reference "{name}": {name}: not found'
)
PARSE = (
    'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": '
    "invalid reference format: repository name must be lowercase"
)
NOT_FOUND_MISSING = NOT_FOUND.format(name=MISSING)
NEVER = 'Container image "{image}" is not present with pull policy of Never'
SHAPES = {
    "pull-fails": (
        MISSING,
        None,
        NOT_FOUND_MISSING,
        [
            ("Normal", "Pulling", f'Pulling image "{MISSING}"'),
            ("Warning", "Failed", f'Failed to pull image "{MISSING}": {NOT_FOUND_MISSING}'),
            ("Warning", "Failed", "Error: ErrImagePull"),
        ],
    ),
    "short-name-is-quoted-as-written-and-pulled-in-full": (
        "nginx",
        None,
        NOT_FOUND.format(name="docker.io/library/nginx:latest"),
        [
            ("Normal", "Pulling", 'Pulling image "nginx"'),
            (
                "Warning",
                "Failed",
                'Failed to pull image "nginx": '
                + NOT_FOUND.format(name="docker.io/library/nginx:latest"),
            ),
            ("Warning", "Failed", "Error: ErrImagePull"),
        ],
    ),
    "invalid-name": (
        "Vllm/X:1",
        None,
        PARSE.format(image="Vllm/X:1"),
        [
            ("Warning", "InspectFailed", PARSE.format(image="Vllm/X:1")),
            ("Warning", "Failed", "Error: InvalidImageName"),
        ],
    ),
    "never-pulled": (
        MISSING,
        "Never",
        NEVER.format(image=MISSING),
        [
            ("Warning", "ErrImageNeverPull", NEVER.format(image=MISSING)),
            ("Warning", "Failed", "Error: ErrImageNeverPull"),
        ],
    ),
}


@pytest.mark.parametrize(
    ("image", "policy", "message", "events"), SHAPES.values(), ids=SHAPES.keys()
)
def test_a_refused_image_is_said_in_the_kubelets_words(
    held: frozenset[str],
    image: str,
    policy: str | None,
    message: str,
    events: list[tuple[str, str, str]],
) -> None:
    p = pod(image, policy)
    refused = puller(held).check(p, p["spec"]["containers"][0])
    assert refused is not None
    assert refused.waiting_message == message
    assert events_of(p, refused) == events
    status = podrefs.waiting_status(p, refused)
    assert status["phase"] == "Pending"
    (container,) = status["containerStatuses"]
    assert container["state"]["waiting"] == {
        "reason": refused.waiting_reason,
        "message": message,
    }
    assert container["image"] == image


def test_a_failed_pull_backs_off_doubling_to_five_minutes_and_says_the_last_error(
    held: frozenset[str],
) -> None:
    clock = Clock()
    pulls = puller(held, clock)
    p = pod(MISSING)
    c = p["spec"]["containers"][0]
    error = NOT_FOUND.format(name=MISSING)
    # Seconds after the first pull -> what the kubelet says then (the back-off: 10, 20, 40 s...).
    timeline = [
        (0, "ErrImagePull"),
        (2, "ImagePullBackOff"),
        (9.9, "ImagePullBackOff"),
        (10, "ErrImagePull"),
        (29.9, "ImagePullBackOff"),
        (30, "ErrImagePull"),
        (69.9, "ImagePullBackOff"),
        (70, "ErrImagePull"),
    ]
    start = clock.now
    for after, reason in timeline:
        clock.now = start + after
        refused = pulls.check(p, c)
        assert refused is not None
        assert refused.waiting_reason == reason, after
    refused = pulls.check(p, c)
    assert refused is not None
    assert refused.waiting_message == f'Back-off pulling image "{MISSING}": ErrImagePull: {error}'
    assert events_of(p, refused) == [
        ("Normal", "BackOff", f'Back-off pulling image "{MISSING}"'),
        ("Warning", "Failed", "Error: ImagePullBackOff"),
    ]
    for _ in range(8):  # 80, 160, 300 (the most), 300...
        clock.now += imagepull.BACKOFF_MAX
        refused = pulls.check(p, c)
        assert refused is not None
        assert refused.waiting_reason == "ErrImagePull"
    clock.now += imagepull.BACKOFF_MAX - 0.1
    refused = pulls.check(p, c)
    assert refused is not None
    assert refused.waiting_reason == "ImagePullBackOff"


def test_the_image_is_pulled_before_the_environment_is_built_and_after_the_volumes(
    held: frozenset[str],
) -> None:
    def lookup(kind: str, namespace: str, name: str) -> Collection[str] | None:
        return None  # no Secret and no ConfigMap exists

    env = [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
    both = pod(MISSING, env=env)
    refused = podrefs.check(both, lookup, images=puller(held).check)
    assert refused is not None
    assert refused.waiting_reason == "ErrImagePull"
    fixed = pod(DEFAULT_ENGINE_IMAGE, env=env)  # the pod recreated with a held image
    refused = podrefs.check(fixed, lookup, images=puller(held).check)
    assert refused is not None
    assert refused.waiting_reason == "CreateContainerConfigError"
    volume = {"name": "input", "configMap": {"name": "prompts"}}
    mounting = pod(MISSING, env=env)
    mounting["spec"]["volumes"] = [volume]
    refused = podrefs.check(mounting, lookup, images=puller(held).check)
    assert refused is not None
    assert refused.event_reason == "FailedMount"


def kwok_pod(image: str, uid: str) -> dict[str, Any]:
    p = pod(image)
    p["metadata"] |= {"name": f"p-{uid}", "uid": uid}
    p["spec"]["nodeName"] = "kwok-gpu-0"
    p["status"] = {"phase": "Pending"}
    return p


def test_the_kwok_gate_holds_an_image_no_node_has_and_starts_the_pod_recreated_with_a_held_one(
    held: frozenset[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imagepull, "held_images", lambda: held)
    gate = kwokgate.Gate(client.ApiClient())
    core = FakeCore()
    gate.core = core  # type: ignore[assignment]
    gate.lookup = lambda kind, namespace, name: set()
    bad = kwok_pod(MISSING, "bad")
    gate.consider(bad)
    gate.consider(bad)  # the retry, within the back-off
    assert core.admitted == []
    said = [(e["reason"], e["involvedObject"]["fieldPath"]) for e in core.events]
    assert said == [
        ("Pulling", "spec.containers{vllm}"),
        ("Failed", "spec.containers{vllm}"),
        ("Failed", "spec.containers{vllm}"),
        ("BackOff", "spec.containers{vllm}"),
        ("Failed", "spec.containers{vllm}"),
    ]
    waiting = [s["containerStatuses"][0]["state"]["waiting"]["reason"] for s in core.statuses]
    assert waiting == ["ErrImagePull", "ImagePullBackOff"]
    gate.forget("bad")  # deleted; its replacement names an image the nodes hold
    gate.consider(kwok_pod(DEFAULT_ENGINE_IMAGE, "good"))
    assert core.admitted == ["p-good"]


def test_the_node_runner_holds_a_container_it_cannot_pull_and_says_each_cause_once(
    held: frozenset[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(imagepull, "held_images", lambda: held)
    posted: list[dict[str, Any]] = []

    worker = pod_worker(pod(MISSING, command=["sleep", "60"]), tmp_path, posted)
    (c,) = worker.containers
    worker._start(c)
    worker._start(c)  # again 2 s later (REFUSED_RETRY), within the pull back-off
    worker._start(c)
    assert c.proc is None
    assert container_status(c)["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert [(e["type"], e["reason"]) for e in posted] == [
        ("Normal", "Pulling"),
        ("Warning", "Failed"),
        ("Warning", "Failed"),
        ("Normal", "BackOff"),
        ("Warning", "Failed"),
    ]
