"""What the demo's examples name and a cluster must already have: the Secrets of their
`tokenSecretRef` and `apiKeySecretRef` and the claims of their `cache.claimName`.

The values of the Secrets are placeholders: kwok's nodes run no container, so no token is ever
sent to Hugging Face and no client calls those endpoints. On a GPU cluster the token is yours
(`kubectl create secret generic hf-token --from-literal=token=hf_...`).

The local cluster has no storage provisioner, so each claim gets a PersistentVolume made for it
and bound to it ahead (the volume's claimRef, the claim's volumeName): kube-controller-manager's
PersistentVolume controller completes the binding, and the scheduler's volume binding then
places the pods on any node (a hostPath volume has no node affinity). kwok's nodes mount nothing,
so the path is never made. On a GPU cluster the claim is a ReadWriteMany volume of your storage
(NFS, CephFS, a cloud file store) that the pods share as the Hugging Face cache.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..supervisor import Cluster
from .serving import DemoError

# Every PersistentVolume the demo makes carries this label, so tear_down finds them.
LABEL = {"app.kubernetes.io/part-of": "llmfleet-demo"}
# The 70B's bfloat16 weights are 141 GB; the claim holds them and some room.
CLAIM_SIZE = "200Gi"
BIND_TIMEOUT = 60.0


@dataclass
class Needs:
    secrets: dict[str, set[str]] = field(default_factory=dict)  # name -> keys
    claims: set[str] = field(default_factory=set)


def needs(specs: list[dict[str, Any]]) -> Needs:
    """The Secrets (with their keys) and claims the LLMDeployment `specs` refer to."""
    got = Needs()
    for spec in specs:
        model, engine = spec.get("model") or {}, spec.get("engine") or {}
        for ref in (model.get("tokenSecretRef"), engine.get("apiKeySecretRef")):
            if ref:
                got.secrets.setdefault(ref["name"], set()).add(ref["key"])
        if (model.get("cache") or {}).get("claimName"):
            got.claims.add(model["cache"]["claimName"])
    return got


def ensure(cluster: Cluster, namespace: str, what: Needs) -> None:
    """Create what is missing of `what` in `namespace`; return once every claim is Bound."""
    for name, keys in sorted(what.secrets.items()):
        if not _exists(cluster, "secret", name, namespace):
            cluster.kubectl(
                "create",
                "secret",
                "generic",
                name,
                "-n",
                namespace,
                *(f"--from-literal={k}=placeholder-{secrets.token_hex(8)}" for k in sorted(keys)),
            )
    for claim in sorted(what.claims):
        _bind(cluster, namespace, claim)


def volume_name(namespace: str, claim: str) -> str:
    return f"{namespace}-{claim}"


def tear_down(cluster: Cluster) -> None:
    """Delete the volumes the demo made (their claims go with the demo's namespace)."""
    cluster.kubectl("delete", "pv", "-l", _selector(), "--ignore-not-found", "--wait=false")


def _bind(cluster: Cluster, namespace: str, claim: str) -> None:
    pv = volume_name(namespace, claim)
    pvc = _get(cluster, "pvc", claim, namespace)
    if pvc and pvc["status"].get("phase") == "Bound":
        return
    volume = _get(cluster, "pv", pv)
    bound_to = ((volume or {}).get("spec", {}).get("claimRef") or {}).get("uid")
    if volume and bound_to and bound_to != (pvc or {}).get("metadata", {}).get("uid"):
        # Left by an earlier demo: released by a claim since deleted (the Retain policy keeps
        # that claim's uid in claimRef), so it would never bind this one.
        cluster.kubectl("delete", "pv", pv, "--wait=true")
        volume = None
    # The volume first, promised to the claim by name: the PersistentVolume controller binds
    # a claim when it sees it arrive, but a claim that arrived before its volume waits for the
    # controller's periodic resync (15 s).
    if volume is None:
        pv_doc = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": dict(LABEL)},
            "spec": {
                "capacity": {"storage": CLAIM_SIZE},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/var/lib/llmfleet-demo/{namespace}/{claim}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pv_doc))
    if pvc is None:
        pvc_doc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": CLAIM_SIZE}},
            },
        }
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(pvc_doc))
    deadline = time.monotonic() + BIND_TIMEOUT
    while True:
        phase = ((_get(cluster, "pvc", claim, namespace) or {}).get("status") or {}).get("phase")
        if phase == "Bound":
            return
        if time.monotonic() > deadline:
            raise DemoError(
                f"the claim {namespace}/{claim} is not Bound to the volume {pv} after "
                f"{BIND_TIMEOUT:.0f}s (phase {phase}); see "
                f"{cluster.state_dir / 'kube-controller-manager.log'}"
            )
        time.sleep(0.5)


def _get(cluster: Cluster, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
    where = ["-n", namespace] if namespace else []
    try:
        got: dict[str, Any] = json.loads(cluster.kubectl("get", kind, name, *where, "-o", "json"))
    except subprocess.CalledProcessError:
        return None
    return got


def _exists(cluster: Cluster, kind: str, name: str, namespace: str = "") -> bool:
    return _get(cluster, kind, name, namespace) is not None


def _selector() -> str:
    return ",".join(f"{k}={v}" for k, v in LABEL.items())
