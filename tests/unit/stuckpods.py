"""Pods that cannot run, as the API server holds them: one the scheduler left unschedulable, one
whose container the kubelet keeps waiting, with the words Kubernetes writes there."""

from __future__ import annotations

from typing import Any


def unschedulable(message: str) -> dict[str, Any]:
    said = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    return {"metadata": {"name": "p-0"}, "status": {"phase": "Pending", "conditions": [said]}}


def waiting(reason: str, message: str = "", container: str = "vllm") -> dict[str, Any]:
    state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return {
        "metadata": {"name": "p-0", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": container, "image": "vllm/vllm-openai:v9", "ready": False, "state": state}
            ],
        },
    }


def crash_looping(
    reason: str, exit_code: int, message: str = "", container: str = "vllm"
) -> dict[str, Any]:
    """A container the kubelet restarts with back-off, its last exit in lastState."""
    pod = waiting(CRASH_LOOP_WAIT, "back-off 40s restarting failed container", container)
    last = {"reason": reason, "exitCode": exit_code, **({"message": message} if message else {})}
    pod["status"]["containerStatuses"][0].update(restartCount=3, lastState={"terminated": last})
    return pod


CRASH_LOOP_WAIT = "CrashLoopBackOff"


def failed(
    reason: str = "", message: str = "", terminated: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod the kubelet gave up on: evicted, or its container exited under restartPolicy Never."""
    state = {"terminated": terminated} if terminated else {}
    return {
        "metadata": {"name": "p-0", "namespace": "ns", "uid": "u"},
        "spec": {"nodeName": "node-a"},
        "status": {
            "phase": "Failed",
            **({"reason": reason, "message": message} if reason else {}),
            "containerStatuses": [{"name": "vllm", "ready": False, "state": state}],
        },
    }


def with_volumes(pod: dict[str, Any], **volumes: dict[str, Any]) -> dict[str, Any]:
    """`pod` with the named volumes in its spec (what a mount Event's volume name leads to)."""
    pod["spec"]["volumes"] = [{"name": name, **source} for name, source in volumes.items()]
    return pod


def running(name: str = "p-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
    }
