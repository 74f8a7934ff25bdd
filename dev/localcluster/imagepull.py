"""What a kubelet does with a container's image on the lab's nodes, which have no registry: the
images a node can pull are the ones it was given (`held_images`), as an air-gapped node's are.
Both of the lab's nodes use it, through podrefs.check: the kwok gate for kwok's nodes and the
node runner, so a pod naming an image no node has waits as it would on a real node, and one
recreated with a held image runs.

The kubelet's words (pkg/kubelet/images/image_manager.go, kuberuntime/kuberuntime_container.go,
events/event.go), each refusal also an Event `Failed`, `Error: <the waiting reason>`:

* a reference that does not parse: waiting `InvalidImageName`, `Failed to apply default image tag
  "REF": couldn't parse image name "REF": invalid reference format`, and an Event `InspectFailed`
  with that message;
* `imagePullPolicy: Never` and the image not held: `ErrImageNeverPull`, `Container image "REF" is
  not present with pull policy of Never`, and an Event `ErrImageNeverPull` with it;
* any other image not held: a pull, which fails as containerd's fails for an image its registry
  does not have: Events `Pulling` (`Pulling image "REF"`) and `Failed` (`Failed to pull image
  "REF": <the error>`), waiting `ErrImagePull` with the error; then, until the pull back-off
  (10 s, doubling, at most 300 s, per pod and image) has passed, `ImagePullBackOff`, `Back-off
  pulling image "REF": ErrImagePull: <the error>` (since Kubernetes 1.32) and an Event `BackOff`
  (`Back-off pulling image "REF"`).
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

from llmfleet.models import DEFAULT_BATCH_IMAGE, DEFAULT_ENGINE_IMAGE
from llmfleet.models.defaults import DEFAULT_FETCHER_IMAGE, DEFAULT_ROUTER_HOP_IMAGE
from llmfleet.models.router import DEFAULT_ROUTER_IMAGE

from .noderunner import images
from .podrefs import Note, Refusal
from .tools import REPO

CHART_VALUES = REPO / "charts" / "llmfleet" / "values.yaml"
# What the lab's own tests and tools run on its nodes (tests/e2e, dev/localcluster): given to
# every node, as an air-gapped node is given the images its workloads need. `registry.invalid`
# images here are placeholders a test never means to run for real (kwok runs nothing).
LAB_IMAGES = (
    "busybox",  # metricsstack/load.py's GPU ballast, a `sleep` on the node runner
    "registry.invalid/gpu-job:1",  # tests/e2e/test_cluster.py
    "registry.invalid/vllm:1",  # tests/e2e/test_cluster.py, a LeaderWorkerSet's pods
    "registry.invalid/x:1",  # tests/e2e/test_cluster.py
    "registry.invalid/idle:1",  # tests/e2e/test_keda.py
    "registry.invalid/p:1",  # lws.py's probe of the LeaderWorkerSet controller
)
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # the kubelet's image pull back-off

# distribution/reference's grammar (reference.go), which the kubelet parses images with.
_ALNUM = r"[a-z0-9]+"
_PATH = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_HOST_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*"
_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?")
NAME_MAX = 255


def parse_error(ref: str) -> str | None:
    """Why the kubelet cannot parse `ref` (distribution/reference's words), or None."""
    found = _REFERENCE.fullmatch(ref)
    if found is None:
        if _REFERENCE.fullmatch(ref.lower()):
            return "invalid reference format: repository name must be lowercase"
        return "invalid reference format"
    if len(found["name"]) > NAME_MAX:
        return f"repository name must not be more than {NAME_MAX} characters"
    return None


def normalised(ref: str) -> str:
    """containerd's name for `ref`: Docker Hub's short names in full, `:latest` when it has
    neither tag nor digest (`busybox` -> `docker.io/library/busybox:latest`)."""
    first, _, rest = ref.partition("/")
    if not rest:
        ref = f"docker.io/library/{ref}"
    elif "." not in first and ":" not in first and first != "localhost" and first == first.lower():
        ref = f"docker.io/{ref}"
    found = _REFERENCE.fullmatch(ref)
    if found is not None and not found["tag"] and not found["digest"]:
        return f"{ref}:latest"
    return ref


@functools.cache
def _chart_engine_image() -> tuple[str, ...]:
    try:
        values = yaml.safe_load(CHART_VALUES.read_text()) or {}
    except OSError:
        return ()
    image = (values.get("engine") or {}).get("defaultImage")
    return (str(image),) if image else ()


def held_images(directory: Path | None = None) -> frozenset[str]:
    """What the lab's nodes can pull, normalised: every image `make images` built (its archive's
    ref names, and each as REPO@DIGEST), the images LLMFleet renders by default for engines,
    batch shards, routers, router hops and adapter fetchers, the chart's engine.defaultImage, and
    LAB_IMAGES."""
    folder = directory or images.images_dir()
    refs = [
        DEFAULT_ENGINE_IMAGE,
        DEFAULT_BATCH_IMAGE,
        DEFAULT_ROUTER_IMAGE,
        DEFAULT_FETCHER_IMAGE,
        DEFAULT_ROUTER_HOP_IMAGE,
        *_chart_engine_image(),
        *LAB_IMAGES,
    ]
    for image in images.built_images(folder):
        name = normalised(image.ref)
        refs += [name, f"{_repository(name)}@{image.digest}"]
    return frozenset(normalised(r) for r in refs)


def _repository(ref: str) -> str:
    """A normalised reference without its tag and digest."""
    found = _REFERENCE.fullmatch(ref)
    return str(found["name"]) if found is not None else ref


def holds(held: Collection[str], ref: str) -> bool:
    """Whether a node holding `held` can start a container of `ref` (a tag and a digest both
    named: the digest decides, as containerd's does)."""
    name = normalised(ref)
    found = _REFERENCE.fullmatch(name)
    if found is not None and found["digest"]:
        return f"{found['name']}@{found['digest']}" in held
    return name in held


def pull_error(ref: str) -> str:
    """containerd's error, through the CRI, for an image its registry does not have."""
    name = normalised(ref)
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{name}": '
        f'failed to resolve reference "{name}": {name}: not found'
    )


def _refused(container: str, reason: str, message: str, *notes: Note) -> Refusal:
    return Refusal(container, reason, message, "Failed", f"Error: {reason}", notes)


class Puller:
    """One pod's image pulls on one node: what the node holds, and the pull back-off of each of
    the pod's images (the kubelet keys it by pod and image)."""

    def __init__(
        self,
        held: Callable[[], Collection[str]] | None = None,  # default: held_images()
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._held = held
        self._clock = clock
        self._lock = threading.Lock()
        # image -> (when the next pull may start, the back-off that led there, the last error)
        self._backoff: dict[str, tuple[float, float, str]] = {}

    def check(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> Refusal | None:
        """Why the kubelet would not start `container` of `pod` for its image now, or None.
        Each call past the back-off is a new pull attempt."""
        name, ref = str(container["name"]), str(container.get("image") or "")
        if (why := parse_error(ref)) is not None:
            said = (
                f'Failed to apply default image tag "{ref}": '
                f'couldn\'t parse image name "{ref}": {why}'
            )
            return _refused(name, "InvalidImageName", said, Note("Warning", "InspectFailed", said))
        if holds((self._held or held_images)(), ref):
            return None
        if container.get("imagePullPolicy") == "Never":
            said = f'Container image "{ref}" is not present with pull policy of Never'
            never = Note("Warning", "ErrImageNeverPull", said)
            return _refused(name, "ErrImageNeverPull", said, never)
        now = self._clock()
        with self._lock:
            retry_at, delay, error = self._backoff.get(ref, (0.0, 0.0, ""))
            if now < retry_at:
                backoff = f'Back-off pulling image "{ref}"'
                said = f"{backoff}: ErrImagePull: {error}"
                return _refused(name, "ImagePullBackOff", said, Note("Normal", "BackOff", backoff))
            error = pull_error(ref)
            delay = min(BACKOFF_MAX, delay * 2) if delay else BACKOFF_START
            self._backoff[ref] = (now + delay, delay, error)
        return _refused(
            name,
            "ErrImagePull",
            error,
            Note("Normal", "Pulling", f'Pulling image "{ref}"'),
            Note("Warning", "Failed", f'Failed to pull image "{ref}": {error}'),
        )
