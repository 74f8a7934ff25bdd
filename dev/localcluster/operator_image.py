"""The operator image `make images` builds (dev/images/build.sh), as the chart names it: built here
when its stamp is stale, found in its OCI archive under the chart's repository:appVersion."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from .noderunner.images import find_image
from .operator_process import CHART
from .supervisor import REPO

BUILD_IMAGES = REPO / "dev" / "images" / "build.sh"
# A cold build of the operator image took about 2 minutes here; warm, its stamp makes it a no-op.
BUILD_TIMEOUT = 900


def operator_image(build: bool = True) -> tuple[str, Path]:
    """The built operator image's reference and archive (`make images`; built here if `build`
    and its stamp is stale)."""
    if build:
        out = subprocess.run(
            [str(BUILD_IMAGES), "operator"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"make images failed:\n{out.stderr[-4000:]}")
    archive = Path(
        subprocess.run(
            [str(BUILD_IMAGES), "--print-path", "operator"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    with_tag = _chart_image()
    if find_image(with_tag, archive.parent) is None:
        raise RuntimeError(f"{archive} does not hold {with_tag}: run make images")
    return with_tag, archive


def _chart_image() -> str:
    """The image `helm install` runs by default: repository:appVersion."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"
