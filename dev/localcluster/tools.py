"""Where the local cluster's pieces are: this repository, and the upstream binaries that
build-tools.sh builds at pinned versions and caches (~/.cache/llmfleet)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD_TOOLS = HERE / "build-tools.sh"


def build(*tools: str) -> None:
    """Build each of `tools` (build-tools.sh's names: etcd, kubernetes, kwok, lws, keda ...)
    unless its cache has it already."""
    subprocess.run([str(BUILD_TOOLS), *tools], check=True)


def bindir(component: str) -> Path:
    out = subprocess.run(
        [str(BUILD_TOOLS), "--bindir", component], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out)


def pinned_versions() -> dict[str, str]:
    out = subprocess.run(
        [str(BUILD_TOOLS), "--versions"], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in out.split())
