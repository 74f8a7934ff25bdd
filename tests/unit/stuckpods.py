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
