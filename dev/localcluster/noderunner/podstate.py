"""What the parts of a pod worker (pods.py) share: the hooks into the runner, and the worker's
state that those parts (podstart.py, podstop.py, podstatus.py) read and write."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import imagepull, podrefs
from . import oci, volumes
from .adaptations import Context
from .container import Conditions, Container
from .realgpus import RealGpus


@dataclass
class Hooks:
    """What a pod worker needs from the runner."""

    context: Callable[[str], Context]  # pod IP -> adaptation context
    read_secret_key: Callable[[str, str, str], str | None]  # namespace, name, key
    read_configmap_key: Callable[[str, str, str], str | None]
    read_configmap: volumes.ReadConfigMap  # namespace, name -> data (configMap volumes)
    patch_status: Callable[[str, str, dict[str, Any]], None]  # namespace, name, status
    delete_pod: Callable[[str, str, str], None]  # namespace, name, uid
    log_dir: Path
    node: str
    runner_id: str  # procs.runner_id(): marks this runner's processes
    base_env: Mapping[str, str]
    state_dir: Path  # volumes are emulated under it (see volumes.py)
    lookup: podrefs.Lookup  # kind, namespace, name -> keys of a Secret / ConfigMap, None: missing
    post_event: Callable[[dict[str, Any]], None]  # a core/v1 Event, as the kubelet posts one
    containers: oci.Node | None = None  # runs containers of built images (oci.py)
    read_secret: Callable[[str, str], Mapping[str, str] | None] | None = None  # decoded data
    gpus: RealGpus | None = None  # on a machine with real GPUs (realgpus.py): the devices


class PodState:
    """The part of PodWorker (pods.py) that its other parts build on; PodWorker's __init__ sets
    what is declared here."""

    pod: dict[str, Any]
    ns: str
    pod_name: str
    uid: str
    ip: str
    hooks: Hooks
    gone: threading.Event
    shutdown: threading.Event
    containers: list[Container]
    start_time: str
    conditions: Conditions
    _said: set[str]
    pulls: imagepull.Puller  # the pod's image pulls on this node (their back-off)
    last_status: dict[str, Any] | None
    log_path: Path
    _last_env: dict[str, dict[str, str]]

    def _termination_message(self, c: Container, exit_code: int) -> str:
        return volumes.termination_message(
            c.volumes, exit_code, c.spec.get("terminationMessagePolicy"), self.log_path
        )
