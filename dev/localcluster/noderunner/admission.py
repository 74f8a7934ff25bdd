"""What the node runner does with a pod bound to its node that it has not started yet.

A kubelet starts every pod bound to it; this runner can only start pods it can really run on
this machine: GPU pods (vLLM on the CPU), the vLLM Router, and pods whose every image was built
here (images.py; oci.py runs them). The rest it refuses as a kubelet refuses a pod it cannot
admit (phase Failed).

One case is not a refusal: an image of a repository built here whose tag or digest is no longer
among the built images (the operator image was rebuilt under a Deployment that names the old
digest). A kubelet pulls and fails: the pod stays Pending, its container waiting in ErrImagePull,
and the ReplicaSet does not replace it. Refusing it instead made a Deployment churn through failed
pods and blamed a missing GPU request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import images, router
from .gpurequest import GPU_RESOURCE, requested_gpus


@dataclass(frozen=True)
class Refusal:
    """The pod status that says why the pod does not run."""

    status: dict[str, Any]
    log: str


def refusal(pod: dict[str, Any], node: str) -> Refusal | None:
    """None when the runner can start `pod`, else the status to write and a line to log."""
    if requested_gpus(pod) > 0 or router.is_router_pod(pod) or images.runs_built_images(pod):
        return None
    missing = images.stale_built_images(pod)
    if missing:
        return _image_pull_error(pod, missing)
    return Refusal(
        {
            "phase": "Failed",
            "reason": "NodeRunnerRejected",
            "message": f"{node} runs only pods that request {GPU_RESOURCE}, the vLLM Router, or "
            "pods whose every image was built here (make images): each one really runs on this "
            "machine",
        },
        f"rejected (no {GPU_RESOURCE} request, not the router, images not built here)",
    )


def _image_pull_error(pod: Mapping[str, Any], missing: dict[str, str]) -> Refusal:
    statuses = []
    for c in pod["spec"].get("containers") or []:
        image = c.get("image") or ""
        waiting: dict[str, Any] = {"reason": "ContainerCreating"}
        if c["name"] in missing:
            waiting = {
                "reason": "ErrImagePull",
                "message": f"{image}: not among the images built here ({missing[c['name']]}); "
                "`make images` builds the current one",
            }
        statuses.append(
            {
                "name": c["name"],
                "image": image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": waiting},
            }
        )
    what = ", ".join(f"{name}: {built}" for name, built in missing.items())
    return Refusal({"phase": "Pending", "containerStatuses": statuses}, f"ErrImagePull ({what})")
