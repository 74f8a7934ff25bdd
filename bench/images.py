"""Image figures: `make images` from a cold cache, and the size of the operator image it built."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

BUILD = Path(__file__).resolve().parents[1] / "dev" / "images" / "build.sh"


def run() -> dict[str, float]:
    """dev/images/build.sh with a cache and an output folder of its own, both empty: no base,
    no buildah storage, no archives (and the Dockerfiles' pip keeps no cache), as on a fresh
    machine with the Debian packages of `make images-deps` installed."""
    with tempfile.TemporaryDirectory(prefix="llmfleet-images-") as tmp:
        env = {**os.environ, "LLMFLEET_CACHE": f"{tmp}/cache", "LLMFLEET_IMAGES_OUT": f"{tmp}/out"}
        start = time.monotonic()
        try:
            subprocess.run([str(BUILD)], check=True, env=env)
            took = time.monotonic() - start
            mib = {
                name: (Path(tmp) / "out" / f"{name}.oci.tar").stat().st_size / 2**20
                for name in ("operator", "router")
            }
        finally:
            # buildah's storage holds overlay layers: let buildah remove what it made.
            subprocess.run([str(BUILD), "--wipe"], check=False, env=env)
    return {
        "image_build_s": took,
        "operator_image_mib": mib["operator"],
        "router_image_mib": mib["router"],
    }
