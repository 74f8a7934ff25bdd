"""The chart's operator Deployment as a user runs it: `helm install` with the image `make images`
built, the pod on the node runner's node, its container run by crun from that image
(dev/localcluster/operator_pod.py, noderunner/oci.py). On a cluster of its own, so the session's
operator (which watches every namespace) cannot be the one that reconciles."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from localcluster.metricsstack.load import GROUP, PLURAL, VERSION
from localcluster.noderunner.oci import Runtime
from localcluster.operator_pod import OperatorPod, operator_image
from localcluster.owncluster import own_cluster
from localcluster.upgrade import kwok_llmd
from localcluster.waiting import wait_until

from .harness import condition

pytestmark = pytest.mark.cluster

NAMESPACE = "served"
# Not a multiple of 1000: never another index's ports, nor the upgrade test's own cluster's.
PORT_SHIFT = 500
RUNNER_OCTET = 20  # its runner's pods: 127.<20 + 10 x index>.x.x
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


def test_helm_install_runs_the_operator_pod_from_its_image_and_it_reconciles() -> None:
    operator_image()  # make images, unless its stamp is current
    started = time.monotonic()
    with own_cluster("llmfleet-oppod-", PORT_SHIFT, RUNNER_OCTET, gpus=1) as cluster:
        release = OperatorPod(cluster)
        pod = release.install()
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        (status,) = pod["status"]["containerStatuses"]
        # Running and Ready by the chart's own probes (httpGet /healthz on port `health`).
        assert status["ready"], status
        assert status["restartCount"] == 0, status
        assert pod["spec"]["nodeName"] == "local-gpu-0"

        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        doc = kwok_llmd()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, doc)
        llmd_name = doc["metadata"]["name"]

        def available() -> bool:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, llmd_name)
            return condition(obj, "Available").get("status") == "True"

        wait_until(available, timeout=120, interval=1, what=f"{llmd_name} Available")
        # Reconciled by that pod: its status written with the chart's ServiceAccount's token
        # bound to the operator pod (the projected token the node runner asked for).
        assert (release.username, name) in audit_writers(cluster.state_dir, "llmdeployments")

        crun = Runtime(cluster.state_dir / "crun")
        container = f"{uid}-operator"

        def in_container(*command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                crun.exec_argv(container, *command),
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
        pid = crun.pid(container)
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
    print(f"operator pod e2e: {time.monotonic() - started:.0f} s")
