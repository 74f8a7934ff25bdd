"""Node-runner pod workers (dev/localcluster/noderunner/pods.py) with no runner and no API server
behind them, for the lab's tests that start a container's process on this machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from localcluster.noderunner.adaptations import Context
from localcluster.noderunner.pods import PodWorker
from localcluster.noderunner.podstate import Hooks


def _nothing(*args: Any) -> None:
    return None


def pod_worker(
    pod: dict[str, Any],
    state_dir: Path,
    posted: list[dict[str, Any]] | None = None,
    *,
    real_processes: bool = False,
) -> PodWorker:
    """A worker for `pod`, which exists only in the test: every Secret and ConfigMap exists with
    no keys, status patches and deletes go nowhere, the Events it posts are appended to `posted`,
    logs and volumes go under `state_dir`. `real_processes`: `python3` is this interpreter, PATH
    this process's, and the runner id this process's own (its processes are told from a real
    runner's)."""
    (state_dir / "pods").mkdir(exist_ok=True)
    hooks = Hooks(
        context=lambda ip: Context(python=Path(sys.executable), pod_ip=ip),
        read_secret_key=_nothing,
        read_configmap_key=_nothing,
        read_configmap=_nothing,
        patch_status=_nothing,
        delete_pod=_nothing,
        log_dir=state_dir / "pods",
        node="local-gpu-0",
        runner_id=f"test-podworker-{os.getpid()}" if real_processes else "r",
        base_env={"PATH": os.environ["PATH"]} if real_processes else {},
        state_dir=state_dir,
        lookup=lambda kind, namespace, name: set(),
        post_event=posted.append if posted is not None else _nothing,
    )
    return PodWorker(pod, "127.17.0.9", hooks)
