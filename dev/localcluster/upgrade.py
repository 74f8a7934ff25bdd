"""An operator upgrade as a user makes one, on a cluster of its own: the previous release's chart
and operator (extracted from git at `PREVIOUS_RELEASE`) serve an LLMDeployment on a real CPU vLLM
engine behind its router and one on a kwok GPU node; a client keeps sending requests through the
router's Service (the Ready router pods, as kube-proxy picks them: the router rolls when its flags
change) while `helm upgrade` installs this tree's chart (CRDs included) and this tree's operator
takes over from the old one. The e2e test and `make bench` both run it (`upgrade`)."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kubernetes import client, config

from . import owncluster
from .metricsstack.load import tiny_llmd
from .operator_process import Operator
from .routerapi import ROUTER_PORT, routed_engines
from .supervisor import REPO, Cluster
from .waiting import wait_until

# The release before this one (0.1.0): what a user upgrades from.
PREVIOUS_RELEASE = "acc2f64857186829d876030bd5646060cc297563"
GROUP, VERSION, PLURAL = "llmfleet.dev", "v1alpha1", "llmdeployments"
NAMESPACE = "upgrade"
ENGINE_STARTUP = 300  # a vLLM engine on 2 shared cores
VERSION_LABEL = "app.kubernetes.io/version"
ROUTERS = "app.kubernetes.io/component=router"
# A field 0.1.0's CRD does not know: its schema prunes it, the new one keeps it.
NEW_FIELD = ("engine", "podLabels")


def previous_release(dest: Path, commit: str = PREVIOUS_RELEASE) -> tuple[Path, Path]:
    """The chart and the operator's source of `commit`, extracted under `dest`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "charts/llmfleet", "operator/src"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "charts" / "llmfleet", dest / "operator" / "src"


@contextlib.contextmanager
def own_cluster() -> Iterator[Cluster]:
    """A cluster beside the shared one, so that its CRDs can be 0.1.0's, with the node runner's
    GPU node for a real engine."""
    with owncluster.own_cluster("llmfleet-upgrade-", port_shift=11000, runner_octet=19) as c:
        yield c


@dataclass
class RouterEndpoints:
    """The router Service's endpoints as kube-proxy would use them: the Ready router pods without
    a deletionTimestamp, re-read at most every REFRESH_S. The lab's Services get no endpoints for
    loopback pod IPs, so the client picks a pod itself; a router that rolls (new flags at the
    upgrade) is left as a Service leaves it, while its preStop sleep lets it finish."""

    core: client.CoreV1Api
    REFRESH_S: ClassVar[float] = 1.0
    _ips: list[str] = field(default_factory=list)
    _read: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self) -> str | None:
        with self._lock:
            if time.monotonic() - self._read >= self.REFRESH_S:
                self._ips = ready_routers(self.core)
                self._read = time.monotonic()
            return random.choice(self._ips) if self._ips else None


def ready_routers(core: client.CoreV1Api) -> list[str]:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=ROUTERS).items
    return sorted(
        p.status.pod_ip
        for p in pods
        if not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


@dataclass
class Client:
    """Completions through the router's Service, two at a time, until stopped; every failure
    kept."""

    endpoints: RouterEndpoints
    model: str
    sent: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(2)]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def _loop(self) -> None:
        body = json.dumps({"model": self.model, "prompt": "Upgrade", "max_tokens": 8}).encode()
        while not self._stop.is_set():
            self.sent += 1
            router = self.endpoints.pick()
            if router is None:
                self.failed.append(f"{time.strftime('%H:%M:%S')} no Ready router pod")
                self._stop.wait(0.5)
                continue
            req = urllib.request.Request(
                f"http://{router}:{ROUTER_PORT}/v1/completions",
                body,
                {"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    if json.load(r)["usage"]["completion_tokens"] < 1:
                        self.failed.append("no tokens")
            except (OSError, KeyError, ValueError) as e:
                detail = e.read().decode()[:200] if isinstance(e, urllib.error.HTTPError) else ""
                self.failed.append(f"{time.strftime('%H:%M:%S')} {e!r} {detail}")
                self._stop.wait(0.5)


@dataclass
class Outcome:
    requests: int
    failed: list[str]
    # Engine pods (name -> (uid, restarts)) before and after.
    pods_before: dict[str, tuple[str, int]]
    pods_after: dict[str, tuple[str, int]]
    # The new field, as the API server kept it before and after the upgrade.
    new_field_before: Any
    new_field_after: Any
    # Version labels on the engine Deployments once the new operator reconciled them.
    versions_after: set[str]


def engine_pods(core: client.CoreV1Api) -> dict[str, tuple[str, int]]:
    pods = core.list_namespaced_pod(
        NAMESPACE, label_selector="app.kubernetes.io/component=engine"
    ).items
    return {
        p.metadata.name: (p.metadata.uid, sum(s.restart_count for s in p.status.container_statuses))
        for p in pods
        if p.status.container_statuses
    }


def rolled_out(apps: client.AppsV1Api, core: client.CoreV1Api) -> bool:
    """Every engine Deployment runs its current template on all its replicas, Ready, and no
    engine pod of an older one is left, not even terminating."""
    deps = apps.list_namespaced_deployment(
        NAMESPACE, label_selector="app.kubernetes.io/component=engine"
    ).items
    for d in deps:
        st, want = d.status, d.spec.replicas or 0
        if (st.observed_generation or 0) < d.metadata.generation:
            return False
        if not want == (st.updated_replicas or 0) == (st.ready_replicas or 0) == (st.replicas or 0):
            return False
    pods = core.list_namespaced_pod(
        NAMESPACE, label_selector="app.kubernetes.io/component=engine"
    ).items
    return not any(p.metadata.deletion_timestamp for p in pods)


def kwok_llmd() -> dict[str, Any]:
    doc = tiny_llmd("on-kwok")
    doc["spec"]["gpus"] = {"count": 1, "memoryGiB": 80, "perNode": 8,
                           "product": "NVIDIA-H100-80GB-HBM3"}  # fmt: skip
    doc["spec"]["autoscaling"] = {"enabled": False}
    return doc


def probe_new_field(custom: client.CustomObjectsApi, name: str) -> Any:
    """Create an LLMDeployment with the new field; what the API server kept of it."""
    doc = kwok_llmd()
    doc["metadata"]["name"] = name
    doc["spec"][NEW_FIELD[0]][NEW_FIELD[1]] = {"team": "search"}
    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, doc)
    kept = custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    return kept["spec"].get(NEW_FIELD[0], {}).get(NEW_FIELD[1])


def upgrade(cluster: Cluster, settle_s: float = 15.0) -> Outcome:
    """Previous release → this tree, under load; see the module docstring."""
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    work = Path(tempfile.mkdtemp(prefix="llmfleet-previous-"))
    chart, source = previous_release(work)
    old = Operator(cluster, chart=chart, source=source, name="operator-previous")
    old.install_identity()
    old.start(wait_leading=False)  # 0.1.0 has no leader election
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    served = tiny_llmd("served", minReplicas=1, maxReplicas=2)
    served["spec"]["model"]["servedModelName"] = "tiny"
    for doc in (served, kwok_llmd()):
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, doc)
    router = wait_until(lambda: ready_routers(core), ENGINE_STARTUP, 2, "the router Ready")[0]
    wait_until(lambda: len(engine_pods(core)) == 2, ENGINE_STARTUP, 2, "both engine pods")
    wait_until(lambda: routed_engines(router), ENGINE_STARTUP, 2, "the router routing")
    before = engine_pods(core)
    field_before = probe_new_field(custom, "probe-before")

    load = Client(RouterEndpoints(core), "tiny")
    load.start()
    try:
        time.sleep(3)
        # helm upgrade to this tree (its CRDs included), then a rolling update: the new
        # operator starts, takes the Lease, and the old one is stopped.
        new = Operator(cluster)
        new.install_identity()
        new.start()
        old.stop()

        def versions() -> set[str]:
            deps = apps.list_namespaced_deployment(
                NAMESPACE, label_selector="app.kubernetes.io/component=engine"
            ).items
            return {(d.metadata.labels or {}).get(VERSION_LABEL, "") for d in deps}

        wait_until(lambda: "" not in versions(), 60, 1, "the new operator's labels")
        # A release whose engine pod templates differ (CHANGELOG.md: `Engine pods: restarted`)
        # rolls them, still under load; otherwise this returns at once.
        wait_until(lambda: rolled_out(apps, core), ENGINE_STARTUP, 2, "the engine rollouts")
        time.sleep(settle_s)  # a few resyncs of the new operator under load
    finally:
        load.stop()
    new.stop()
    return Outcome(
        requests=load.sent,
        failed=load.failed,
        pods_before=before,
        pods_after=engine_pods(core),
        new_field_before=field_before,
        new_field_after=probe_new_field(custom, "probe-after"),
        versions_after=versions(),
    )
