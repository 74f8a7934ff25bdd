"""PersistentVolumeClaims on the local cluster, bound at once to a hostPath PersistentVolume of
their own (no provisioner runs here): the node runner mounts the directory into its pods, and
kwok's pods mount nothing, so a path that does not exist does for them. The e2e tests and the
benchmarks share these."""

from __future__ import annotations

import shutil
from pathlib import Path

from kubernetes import client

from .supervisor import Cluster
from .waiting import wait_until

# On the PersistentVolumes made here: the namespace they serve, to delete them with it.
CLAIM_NAMESPACE_LABEL = "llmfleet.dev/test-namespace"


def bound_claim(core: client.CoreV1Api, namespace: str, name: str, host_path: str) -> str:
    """A PersistentVolumeClaim `name` and the PersistentVolume (hostPath, labelled with the
    namespace; the caller deletes it) it binds to; the PersistentVolume's name."""
    pv = f"{namespace}-{name}"
    core.create_persistent_volume(
        {
            "metadata": {"name": pv, "labels": {CLAIM_NAMESPACE_LABEL: namespace}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": host_path},
                "claimRef": {"namespace": namespace, "name": name},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    return pv


def claim(api: client.ApiClient, cluster: Cluster, ns: str, name: str) -> Path:
    """A bound claim; the node runner keeps its files in the returned directory."""
    core = client.CoreV1Api(api)
    directory = cluster.state_dir / "pvcs" / ns / name
    directory.mkdir(parents=True, exist_ok=True)
    bound_claim(core, ns, name, str(directory))
    wait_until(
        lambda: core.read_namespaced_persistent_volume_claim(name, ns).status.phase == "Bound",
        timeout=60,
        what=f"claim {name} bound",
    )
    return directory


def remove_claims(api: client.ApiClient, cluster: Cluster, ns: str) -> None:
    """The PersistentVolumes `claim` and `bound_claim` made for `ns`, and `claim`'s
    directories."""
    core = client.CoreV1Api(api)
    for pv in core.list_persistent_volume(label_selector=f"{CLAIM_NAMESPACE_LABEL}={ns}").items:
        core.delete_persistent_volume(pv.metadata.name)
    shutil.rmtree(cluster.state_dir / "pvcs" / ns, ignore_errors=True)
