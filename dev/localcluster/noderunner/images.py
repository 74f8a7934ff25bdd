"""The images built here (`make images`: OCI archives under build/images) that pods may run from,
found by the reference a container names.

Which images: a container image `REF` runs here when one of the archives of `RUN_FROM_IMAGE` in the
images directory names `REF` (the `org.opencontainers.image.ref.name` annotation `make images`
writes), e.g. `docker.io/llmfleet/operator:0.2.0` -> build/images/operator.oci.tar, and a LoRA
engine pod's `docker.io/llmfleet/adapter-fetcher:1` -> build/images/adapter-fetcher.oci.tar.
`REPO@sha256:...` matches the archive of that repository whose manifest has that digest. Anything
else is not an image of this machine: the runner runs it as before (a process) or rejects the pod.
The router's archive is not among them (yet): the node runner runs router pods from the host's
router virtualenv, whose path its router adaptation writes into the command, which a container of
the image lacks.
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
REF_ANNOTATION = "org.opencontainers.image.ref.name"


def images_dir() -> Path:
    """Where `make images` writes its archives (dev/images/build.sh's LLMFLEET_IMAGES_OUT)."""
    return Path(os.environ.get("LLMFLEET_IMAGES_OUT", REPO / "build" / "images"))


@dataclass(frozen=True)
class Image:
    ref: str  # the name inside the archive
    archive: Path
    digest: str  # the manifest's, sha256:...


_index_cache: dict[Path, tuple[float, list[Image]]] = {}
_index_lock = threading.Lock()


def _archive_images(archive: Path) -> list[Image]:
    mtime = archive.stat().st_mtime
    with _index_lock:
        cached = _index_cache.get(archive)
        if cached and cached[0] == mtime:
            return cached[1]
    with tarfile.open(archive) as tar:
        index = tar.extractfile("index.json")
        manifests = json.load(index)["manifests"] if index else []
    found = [
        Image(m["annotations"][REF_ANNOTATION], archive, m["digest"])
        for m in manifests
        if REF_ANNOTATION in (m.get("annotations") or {})
    ]
    with _index_lock:
        _index_cache[archive] = (mtime, found)
    return found


def _normalise(ref: str) -> str:
    """Docker's short names: `llmfleet/operator:1` is `docker.io/llmfleet/operator:1`."""
    first = ref.split("/", 1)[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{ref}"
    return ref


# The archives whose images pods run from (see the module docstring for why not the router's):
# the operator's, and the same image under the adapter fetcher's name and version.
RUN_FROM_IMAGE = ("operator.oci.tar", "adapter-fetcher.oci.tar")


def find_image(ref: str | None, directory: Path | None = None) -> Image | None:
    """The built image `ref` names, or None."""
    if not ref:
        return None
    want = _normalise(ref)
    repository, _, digest = want.partition("@")
    folder = directory or images_dir()
    for archive in [folder / name for name in RUN_FROM_IMAGE if (folder / name).is_file()]:
        with contextlib.suppress(OSError, tarfile.TarError, ValueError, KeyError):
            for image in _archive_images(archive):
                name = _normalise(image.ref)
                if name == want or (
                    digest and image.digest == digest and _repo(name) == repository
                ):
                    return image
    return None


def built_images(directory: Path | None = None) -> list[Image]:
    """Every image of every archive `make images` built, whichever runs here (the router's too)."""
    found: list[Image] = []
    for archive in sorted((directory or images_dir()).glob("*.oci.tar")):
        with contextlib.suppress(OSError, tarfile.TarError, ValueError, KeyError):
            found += _archive_images(archive)
    return found


def _repo(ref: str) -> str:
    """`host/path:tag` without the tag."""
    head, _, tail = ref.rpartition("/")
    return f"{head}/{tail.split(':', 1)[0]}"


def stale_built_images(pod: Mapping[str, Any], directory: Path | None = None) -> dict[str, str]:
    """Containers whose image names a repository built here but a tag or digest that is not (a
    rebuilt image under an older pod template), each with the reference that is built now."""
    folder = directory or images_dir()
    built: dict[str, str] = {}
    for archive in [folder / name for name in RUN_FROM_IMAGE if (folder / name).is_file()]:
        with contextlib.suppress(OSError, tarfile.TarError, ValueError, KeyError):
            for image in _archive_images(archive):
                built[_repo(_normalise(image.ref))] = f"{image.ref}@{image.digest}"
    stale = {}
    for c in pod["spec"].get("containers") or []:
        ref = c.get("image")
        if not ref or find_image(ref, directory):
            continue
        repository = _repo(_normalise(ref).partition("@")[0])
        if repository in built:
            stale[c["name"]] = built[repository]
    return stale


def runs_built_images(pod: Mapping[str, Any], directory: Path | None = None) -> bool:
    """Every container of the pod has a built image (the runner admits such a pod)."""
    containers = pod["spec"].get("containers") or []
    return bool(containers) and all(find_image(c.get("image"), directory) for c in containers)
