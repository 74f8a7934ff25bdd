"""The chart's operator Deployment as a user runs it: `helm install` with the image `make images`
built, the pod on a node of the lab (`local-system-0`), its container run by crun from that image
(dev/localcluster/operator_pod.py, noderunner/oci.py). It is the e2e session's own operator: every
test reconciles through it; this one checks what a user of the chart would look at."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from localcluster.metricsstack.load import GROUP, PLURAL, VERSION
from localcluster.noderunner.crun import Runtime
from localcluster.operator_pod import Mark
from localcluster.supervisor import Cluster
from localcluster.systemnode import NODE
from localcluster.upgrade import kwok_llmd
from localcluster.waiting import wait_until

from .harness import E2E_GPU_PRODUCT, Operator, condition

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("the lab's system node, where the operator pod runs from its image"),
]

IMAGE_UID = 65532  # the image's user, the chart's runAsUser
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


def audit_writers(state_dir: Path, resource: str) -> set[tuple[str, str]]:
    """(username, the pod its token was bound to) of every write to `resource`'s status."""
    out = set()
    for path in sorted(state_dir.glob("audit*.log")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("resource") == resource and ref.get("subresource") == "status":
                user = event["user"]
                pods = (user.get("extra") or {}).get(POD_NAME_EXTRA) or [""]
                out.add((user["username"], pods[0]))
    return out


def test_helm_install_runs_the_operator_pod_from_its_image_and_it_reconciles(
    operator: Operator, cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    pod = operator.leader_pod()
    assert pod is not None
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    (status,) = pod["status"]["containerStatuses"]
    # Running and Ready by the chart's own probes (httpGet /healthz on port `health`), never
    # crashed. It does exit, by design, when it cannot renew its Lease within the renew deadline
    # (an API server down that long, as test_resilience.py makes it on this worker's lab): the
    # kubelet restarts it, and it stands by or leads again. Any other exit fails here.
    assert status["ready"], status
    exits = operator.exits_since(Mark(uid, 0))
    assert all("leader Lease lost" in why for why in exits), exits
    assert status["restartCount"] == len(exits), (status, exits)
    assert pod["spec"]["nodeName"] == NODE
    (container,) = pod["spec"]["containers"]
    assert container["image"].startswith("docker.io/llmfleet/operator")

    custom = client.CustomObjectsApi(api)
    doc = kwok_llmd()
    doc["spec"]["gpus"]["product"] = E2E_GPU_PRODUCT
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    llmd_name = doc["metadata"]["name"]

    def available() -> bool:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, llmd_name)
        return condition(obj, "Available").get("status") == "True"

    wait_until(available, timeout=120, interval=1, what=f"{llmd_name} Available")
    # Reconciled by that pod: its status written with the chart's ServiceAccount's token
    # bound to the operator pod (the projected token the node runner asked for).
    assert (operator.username, name) in audit_writers(cluster.state_dir, "llmdeployments")

    crun = Runtime(cluster.state_dir / "crun")
    container_id = f"{uid}-operator"

    def in_container(*command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            crun.exec_argv(container_id, *command),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    written = in_container("sh", "-c", "echo x > /written-by-test")
    assert written.returncode != 0
    assert "Read-only file system" in written.stderr
    # /tmp is the chart's emptyDir: writable.
    assert in_container("sh", "-c", "echo x > /tmp/written-by-test").returncode == 0
    assert in_container("id", "-u").stdout.strip() == str(IMAGE_UID)
    pid = crun.pid(container_id)
    assert pid is not None
    uids = next(
        line.split()[1:]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert set(uids) == {str(IMAGE_UID)}
    # The in-cluster config as a kubelet mounts it: the pod's token, the CA, the namespace.
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    listed = in_container("ls", token_dir).stdout.split()
    assert {"token", "ca.crt", "namespace"} <= set(listed)
