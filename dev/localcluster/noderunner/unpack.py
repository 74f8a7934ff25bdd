"""Built images unpacked for crun (umoci): each image's root filesystem and runtime config, once
per manifest digest on this machine. The unpack (about 20 s of a 2-core machine's time for the
operator image, each lab's first operator pod waiting on it) happens once in a cache that every
lab shares (`${LLMFLEET_CACHE:-~/.cache/llmfleet}/unpacked/`: `make test`'s workers, `make demo`,
later runs of the same image), and each lab gets the result as hard links under its own state
directory (under a second): pruning the shared cache never takes a root filesystem from under a
lab's running container, and wiping a lab leaves the cache."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .images import Image

# Digests the shared cache keeps, the most recently used (an unpacked image is about 300 MB).
SHARED_KEEP = 6


def shared_cache() -> Path:
    cache = Path(os.environ.get("LLMFLEET_CACHE", Path.home() / ".cache" / "llmfleet"))
    return cache / "unpacked"


class Unpacked:
    """Images unpacked once per manifest digest under `cache` (umoci unpack): a root filesystem
    that every container of that image shares read-only, and umoci's runtime config as the
    template of each container's. `shared`: where the unpack itself is made and kept for other
    caches to link from (None: unpacked here, shared with no one)."""

    def __init__(self, cache: Path, shared: Path | None = None) -> None:
        self.cache = cache
        self.shared = shared
        self._lock = threading.Lock()

    def get(self, image: Image) -> Path:
        key = image.digest.replace(":", "_")
        target = self.cache / key
        with self._lock:
            if (target / "image-config.json").is_file():
                return target
            self.cache.mkdir(parents=True, exist_ok=True)
            if self.shared is None:
                _unpack(image, self.cache, target)
                return target
            with _locked(self.shared):  # one unpack of a digest at a time on this machine
                source = self.shared / key
                if not (source / "image-config.json").is_file():
                    _unpack(image, self.shared, source)
                os.utime(source)  # used now: pruned last
                if not _linked(source, target):
                    _unpack(image, self.cache, target)  # another filesystem: no hard links
                _prune(self.shared, keep=SHARED_KEEP)
            return target


def _unpack(image: Image, cache: Path, target: Path) -> None:
    work = cache / f".unpacking-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "layout").mkdir(parents=True)
    try:
        subprocess.run(["tar", "-C", str(work / "layout"), "-xf", str(image.archive)], check=True)
        subprocess.run(
            ["umoci", "unpack", "--image", f"{work / 'layout'}:{image.ref}", str(work / "bundle")],
            check=True,
            capture_output=True,
        )
        bundle = work / "bundle"
        (bundle / "image-config.json").write_text(json.dumps(_image_config(image)))
        shutil.rmtree(target, ignore_errors=True)
        bundle.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _linked(source: Path, target: Path) -> bool:
    """`target` as hard links to `source`'s files, made whole before it appears; False where
    the two are on different filesystems."""
    work = target.parent / f".linking-{os.getpid()}-{target.name}"
    shutil.rmtree(work, ignore_errors=True)
    made = subprocess.run(["cp", "-al", str(source), str(work)], capture_output=True, check=False)
    if made.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        return False
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    return True


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _prune(cache: Path, keep: int) -> None:
    unpacked = [p for p in cache.iterdir() if (p / "image-config.json").is_file()]
    unpacked.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in unpacked[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _image_config(image: Image) -> dict[str, Any]:
    """The image's config (Entrypoint, Cmd, Env, User, WorkingDir)."""

    def blob(digest: str) -> Any:
        member = tar.extractfile(f"blobs/{digest.replace(':', '/')}")
        assert member is not None
        return json.load(member)

    with tarfile.open(image.archive) as tar:
        manifest = blob(image.digest)
        config: dict[str, Any] = blob(manifest["config"]["digest"]).get("config") or {}
    return config


def image_config(unpacked: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((unpacked / "image-config.json").read_text())
    return config
