"""The status a pod worker writes through pods/status: phase, conditions and container statuses,
as the kubelet reports them."""

from __future__ import annotations

import logging
from typing import Any

from .container import container_status, gates_pass
from .podstate import PodState

# pods.py's logger: a pod's log lines keep the name they had before its worker was split.
log = logging.getLogger("noderunner.pods")


class StatusWriter(PodState):
    """The part of PodWorker (pods.py) that writes its pod's status."""

    def _publish(self, force_not_ready: bool = False) -> None:
        statuses = [container_status(c) for c in self.containers]
        containers_ready = not force_not_ready and all(s["ready"] for s in statuses)
        # As the kubelet: a pod with readiness gates is Ready only once every gate's condition,
        # which another controller writes into status, is True as well.
        ready = containers_ready and gates_pass(self.pod)
        if all(c.finished for c in self.containers):
            codes = [(c.last_terminated or {}).get("exitCode", 0) for c in self.containers]
            phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
        elif any(c.proc is not None or c.restart_count for c in self.containers):
            phase = "Running"
        else:
            phase = "Pending"
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "conditions": [
                self.conditions("PodReadyToStartContainers", True),
                self.conditions("Initialized", True),
                self.conditions("Ready", ready),
                self.conditions("ContainersReady", containers_ready),
                self.conditions("PodScheduled", True),
            ],
            "containerStatuses": statuses,
        }
        if status == self.last_status:
            return
        try:
            self.hooks.patch_status(self.ns, self.pod_name, status)
            self.last_status = status
        except Exception as e:  # the API may be briefly away; the next tick retries
            log.warning("%s/%s: status update failed: %s", self.ns, self.pod_name, e)
