"""The API server alone: etcd and kube-apiserver started exactly as the full local cluster starts
them (the same flags: admission plugins, CEL, RBAC, the audit log), beside it, with a state
directory (`<cluster dir>-api`, so `.cluster-api` next to `.cluster`: CI's check for leftover
`.cluster` processes covers it) and ports (Ports.shifted(PORT_SHIFT)) of its own. Ready in
seconds: what the tests' API tier (tests/api) needs for admission, validation, RBAC and what the
operator writes.

Nothing else runs: no scheduler, no controller manager, no nodes. So no pod is ever created for
a Deployment or a Job, no garbage is collected, and a deleted namespace stays Terminating until
its `kubernetes` finalizer is removed (`finish_namespace_deletion`).

`python -m localcluster.apionly up|down|wipe` starts, stops or removes it by hand (its
kubeconfig: `<state dir>/kubeconfig`)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from . import pki
from .supervisor import DEFAULT_PROFILE, REPO, Cluster, Ports
from .tools import build

# Ports: every cluster index's ports end in x247-x270, x379, x380 or x443; shifted by 700 they
# end in x947-x970, x079, x080 or x143, which no index's full cluster, nor any other shifted
# cluster of the lab (by 500, 10000, 11000), uses.
PORT_SHIFT = 700
COMPONENTS = ("etcd", "kube-apiserver")


def default_state_dir() -> Path:
    lab = Path(os.environ.get("LLMFLEET_CLUSTER_DIR", REPO / ".cluster"))
    return lab.with_name(f"{lab.name}-api")


@dataclass
class ApiServerCluster(Cluster):
    state_dir: Path = field(default_factory=default_state_dir)
    ports: Ports = field(default_factory=lambda: Ports.shifted(PORT_SHIFT))
    lws: bool = False
    keda: bool = False

    def up(self, profile: Path = DEFAULT_PROFILE, log: Callable[[str], None] = print) -> float:
        """Start etcd and the API server (reusing what already runs); the seconds it took.
        (`profile`, the full cluster's nodes, has no use here.)"""
        start = time.monotonic()
        build("etcd", "kubernetes", "helm")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki.ensure(self.pki_dir)
        self._write_kubeconfig("admin")
        self._start("etcd", self._etcd_cmd())
        self._wait_http(f"http://127.0.0.1:{self.ports.etcd_client}/health", "etcd")
        self._start("kube-apiserver", self._apiserver_cmd())
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", auth=True)
        took = time.monotonic() - start
        log(f"API server up in {took:.1f}s; KUBECONFIG={self.kubeconfig}")
        return took

    def running(self) -> dict[str, bool]:
        return {name: self.alive(name) for name in COMPONENTS}

    def down(self) -> None:
        """Stop the API server, then etcd; no process is left behind. The API server's graceful
        shutdown waits for open watches to end, and those of an operator inside the calling
        process (operator_thread.py) end only with their connection: 2 s, then SIGKILL (the
        next `ensure_up` starts on a fresh store anyway)."""
        self._stop("kube-apiserver", grace=2)
        self._stop("etcd")

    def ensure_up(self) -> bool:
        """Reuse this API server if it runs healthy, else start one on a fresh store; whether it
        was started (then the caller stops it when done)."""
        if self.healthy():
            return False
        self.wipe()
        self.up(log=lambda _: None)
        return True


def controller_manager_runs(api: client.ApiClient) -> bool:
    """Whether a controller manager serves this cluster: its ServiceAccount controller gives
    every namespace, `default` included, a ServiceAccount `default` (the API server alone
    never does)."""
    try:
        client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def finish_namespace_deletion(
    api: client.ApiClient, namespace: str, custom: Iterable[tuple[str, str, str]] = ()
) -> None:
    """What the namespace controller does once a namespace is deleted, as far as a cluster
    without one needs: delete its custom resources of `custom` ((group, version, plural): those
    a controller of this process would otherwise keep reconciling) and remove the namespace's
    `kubernetes` finalizer, so that it goes. Its other objects stay in etcd, unreachable."""
    objects = client.CustomObjectsApi(api)
    for group, version, plural in custom:
        objects.delete_collection_namespaced_custom_object(group, version, namespace, plural)
    core = client.CoreV1Api(api)
    try:
        ns = core.read_namespace(namespace)
    except client.ApiException as e:
        if e.status == 404:
            return
        raise
    ns.spec.finalizers = []
    core.replace_namespace_finalize(namespace, ns)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.apionly", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "wipe"])
    action = parser.parse_args().action
    cluster = ApiServerCluster()
    if action == "up":
        cluster.up()
    elif action == "down":
        cluster.down()
    else:
        cluster.wipe()


if __name__ == "__main__":
    main()
