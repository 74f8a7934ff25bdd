"""Built images unpacked for crun (umoci): each image's root filesystem and runtime config, once
per manifest digest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

from .images import Image


class Unpacked:
    """Images unpacked once per manifest digest under `cache` (umoci unpack): a root filesystem
    that every container of that image shares read-only, and umoci's runtime config as the
    template of each container's."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self._lock = threading.Lock()

    def get(self, image: Image) -> Path:
        target = self.cache / image.digest.replace(":", "_")
        with self._lock:
            if (target / "image-config.json").is_file():
                return target
            self.cache.mkdir(parents=True, exist_ok=True)
            work = self.cache / f".unpacking-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            (work / "layout").mkdir(parents=True)
            try:
                subprocess.run(
                    ["tar", "-C", str(work / "layout"), "-xf", str(image.archive)], check=True
                )
                subprocess.run(
                    [
                        "umoci",
                        "unpack",
                        "--image",
                        f"{work / 'layout'}:{image.ref}",
                        str(work / "bundle"),
                    ],
                    check=True,
                    capture_output=True,
                )
                bundle = work / "bundle"
                (bundle / "image-config.json").write_text(json.dumps(_image_config(image)))
                shutil.rmtree(target, ignore_errors=True)
                bundle.rename(target)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            return target


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
