"""The operator image as `make images` builds it (dev/images/build.sh): built if missing (a
stamp keyed on its inputs makes this a no-op otherwise), then run from its OCI archive."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "dev" / "images" / "build.sh"
# A cold build (the stand-in base and both stages' pip installs) took about 2 minutes here.
BUILD_TIMEOUT = 900


def build(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUILD), *args], capture_output=True, text=True, check=False, timeout=timeout
    )


def test_operator_image_is_built_under_the_charts_name_and_its_entrypoint_runs() -> None:
    built = build("operator", timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-4000:]
    archive = Path(build("--print-path", "operator", timeout=10).stdout.strip())
    chart = yaml.safe_load((REPO / "charts" / "llmfleet" / "Chart.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "llmfleet" / "values.yaml").read_text())
    with tarfile.open(archive) as tar:
        index = tar.extractfile("index.json")
        assert index is not None
        (manifest,) = json.load(index)["manifests"]
    # What `helm install` pulls when image.tag is left empty (buildah's annotation, or the one
    # Docker's `docker save` writes).
    names = {
        manifest.get("annotations", {}).get(key)
        for key in ("org.opencontainers.image.ref.name", "io.containerd.image.name")
    }
    assert f"{values['image']['repository']}:{chart['appVersion']}" in names

    # The image's own entrypoint, run by crun from the archive (build.sh holds the command).
    smoke = build("--smoke", "operator", timeout=300)
    assert smoke.returncode == 0, smoke.stderr[-4000:]
    assert "llmfleet" in smoke.stdout
