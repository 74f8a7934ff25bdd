"""The operator as a user runs it: `helm install` of the chart with the image `make images` built,
its Deployment's pod scheduled onto the node runner's `local-gpu-0`, which runs the container
from that image with crun (noderunner/oci.py): the chart's command, args, env, probes, mounts,
securityContext and ServiceAccount, all as rendered.

The pod runs on `local-system-0` (systemnode.py), a node of its own that outlives the GPU node
runner's restarts. `OperatorPod` gives a test what it reads of an operator (metrics, /healthz,
leadership, its API writes) and does to one (kill its pod, roll it with other chart values), the
same interface as the host-process operator (operator_process.Operator), which stays for what a
pod cannot give a test cheaply: two replicas killed at chosen instants, a previous release's code
(dev/README.md lists which tests use which).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from . import operator_signals as signals
from . import systemnode
from .noderunner.crun import Runtime
from .noderunner.images import find_image
from .operator_image import operator_image
from .operator_process import CHART, CRDS, OPERATOR_NAMESPACE, RELEASE
from .supervisor import Cluster, bindir
from .waiting import wait_until

# The pod's first start unpacks the image (~15 s) before its probes run (initialDelay 10 s).
READY_TIMEOUT = 180
# A new pod leads once the Lease of the one it replaced expired (--lease-duration, 15 s by default)
# or was handed over, and it is Ready.
LEADING_TIMEOUT = 120
HEALTH_PORT_NAME = "health"
METRICS_PORT_NAME = "metrics"


@dataclass(frozen=True)
class Mark:
    """A leading operator pod and how much it had logged (OperatorPod.mark)."""

    pod_uid: str
    log_size: int


@dataclass
class OperatorPod:
    """One release of the chart whose operator runs as a pod on `local-system-0`."""

    cluster: Cluster
    namespace: str = OPERATOR_NAMESPACE
    release: str = RELEASE
    # Chart values set at install (`--set` arguments) beyond those that place the pod here.
    chart_values: tuple[str, ...] = ()
    # Chart values set as JSON (`--set-json`), e.g. gpuProfiles.<name>={...}.
    chart_json: dict[str, Any] = field(default_factory=dict)

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.release}"

    @property
    def resync_seconds(self) -> float:
        """The period of its resync: the chart's `resyncSeconds`, as installed."""
        values = json.loads(
            subprocess.run(
                [
                    str(bindir("helm") / "helm"),
                    f"--kubeconfig={self.cluster.kubeconfig}",
                    "get",
                    "values",
                    self.release,
                    "--namespace",
                    self.namespace,
                    "--all",
                    "--output",
                    "json",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        return float(values["resyncSeconds"])

    def install(
        self, timeout: float = READY_TIMEOUT, *, reuse_values: bool = False
    ) -> dict[str, Any]:
        """`helm upgrade --install` with the built image; return the operator pod once it is
        Running and Ready by its own probes. `reuse_values`: keep the values an earlier install
        set (Helm's --reset-then-reuse-values), so a release that already runs this image with
        them is left as it is."""
        image, archive = operator_image()
        built = find_image(image, archive.parent)
        assert built is not None  # operator_image checked
        systemnode.start_system_node(self.cluster)
        repository, _, tag = image.rpartition(":")
        placement = (
            # The image exists on this machine only: never pulled. Pinned by digest, as in
            # production: a rebuilt image rolls the pod.
            "image.pullPolicy=Never",
            f"image.repository={repository}",
            f"image.tag={tag}",
            f"image.digest={built.digest}",
            "replicas=1",
        )
        subprocess.run(
            [
                str(bindir("helm") / "helm"),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "upgrade",
                "--install",
                self.release,
                str(CHART),
                "--namespace",
                self.namespace,
                "--create-namespace",
                "--take-ownership",
                *(["--reset-then-reuse-values"] if reuse_values else []),
                *(a for v in placement for a in ("--set", v)),
                "--set-json",
                f"nodeSelector={json.dumps(systemnode.NODE_SELECTOR)}",
                "--set-json",
                f"tolerations={json.dumps([systemnode.TOLERATION])}",
                *(
                    a
                    for k, v in sorted(self.chart_json.items())
                    for a in ("--set-json", f"{k}={json.dumps(v)}")
                ),
                *(a for v in self.chart_values for a in ("--set", v)),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        self.cluster.wait_established(CRDS)
        pod: dict[str, Any] = wait_until(
            self._rolled_out, timeout=timeout, interval=1, what=f"{self.release} operator pod Ready"
        )
        return pod

    def start(self, timeout: float = LEADING_TIMEOUT) -> dict[str, Any]:
        """Return the operator pod once one is Ready and leads (holds the Lease); install the
        release first if it has no pod."""
        if not self.pods():
            self.install()
        pod: dict[str, Any] = wait_until(
            self._leading_pod, timeout=timeout, interval=1, what=f"{self.release} pod leading"
        )
        return pod

    def kill(self, pod_name: str | None = None) -> None:
        """Kill the operator's pods (or the one named) as a node failure does: SIGKILL their
        containers' processes, then force-delete the pod objects (grace period 0) so that the
        Deployment makes new ones; one of those leads once the old Lease expired. (A forced
        delete alone leaves the container running until its kubelet notices: for that moment
        the old leader still writes, which is what the Lease cannot prevent.)"""
        crun = Runtime(self.cluster.state_dir / "crun")
        for pod in self.pods():
            name = pod["metadata"]["name"]
            if pod_name not in (None, name):
                continue
            for container in pod["spec"]["containers"]:
                pid = crun.pid(f"{pod['metadata']['uid']}-{container['name']}")
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    wait_until(
                        lambda proc=Path(f"/proc/{pid}"): not proc.exists(),  # type: ignore[misc]
                        timeout=10,
                        what=f"{name} killed",
                    )
            self.cluster.kubectl(
                "delete", "pod", "-n", self.namespace, name,
                "--grace-period=0", "--force", "--wait=false",
            )  # fmt: skip

    def restart(self, timeout: float = 2 * READY_TIMEOUT) -> dict[str, Any]:
        """`kubectl rollout restart` of the release's Deployment: every pod replaced as the
        chart's strategy rolls them (one new pod at a time, an old one deleted once it is Ready:
        SIGTERM, then terminationGracePeriodSeconds), the leader handing the Lease over as it
        stops. Returns the pod that leads once no old pod is left."""
        self.cluster.kubectl("rollout", "restart", "deployment", self.release, "-n", self.namespace)
        pod: dict[str, Any] = wait_until(
            self._leading_pod, timeout=timeout, interval=1, what=f"{self.release} restarted"
        )
        return pod

    def mark(self) -> Mark:
        """Where the leading pod stands now, for `exits_since`."""
        pod: dict[str, Any] = wait_until(
            self._leading_pod, timeout=LEADING_TIMEOUT, interval=1, what="a leading pod"
        )
        log = self.log_of(pod)
        return Mark(pod["metadata"]["uid"], log.stat().st_size if log.exists() else 0)

    def exits_since(self, mark: Mark) -> list[str]:
        """Why the operator's container exited since `mark`: for each exit, the last line it
        logged before it ("pod replaced" when another pod leads now)."""
        pod = self.leader_pod() or self.ready_pod()
        if pod is None or pod["metadata"]["uid"] != mark.pod_uid:
            return ["pod replaced"]
        with self.log_of(pod).open("rb") as f:
            f.seek(mark.log_size)
            text = f.read().decode(errors="replace")
        exits, last = [], ""
        for line in text.splitlines():
            if "node-runner: operator exited" in line:
                exits.append(last)
            elif line.strip():
                last = line
        return exits

    @contextlib.contextmanager
    def configured(self, *chart_values: str) -> Iterator[None]:
        """Inside the block the release runs with these chart values too (`helm upgrade`: the
        Deployment rolls to a pod with what they render, which takes the Lease over); after it,
        with the values it had before (another roll)."""
        before = self.chart_values
        self.chart_values = before + chart_values
        try:
            self.install()
            self.start()
            yield
        finally:
            self.chart_values = before
            self.install()
            self.start()

    # --- what a test reads of it ---------------------------------------------------------

    def lease_holder(self) -> str:
        """The holderIdentity of the release's leader Lease ('' when released or absent): the
        leading pod's name, a '_' and a suffix of its own."""
        try:
            out = self.cluster.kubectl(
                "get", "lease", self.release, "-n", self.namespace, "-o", "json"
            )
        except subprocess.CalledProcessError:
            return ""
        holder: str = json.loads(out)["spec"].get("holderIdentity") or ""
        return holder

    def leader_pod(self) -> dict[str, Any] | None:
        """The Ready pod that holds the Lease."""
        holder = self.lease_holder()
        for pod in self.ready_pods():
            if holder.startswith(pod["metadata"]["name"] + "_"):
                return pod
        return None

    def address(self, port_name: str, pod: dict[str, Any] | None = None) -> str:
        """host:port of a container port of `pod` (default: the leader, else a Ready pod)."""
        pod = pod or self.leader_pod() or self.ready_pod()
        if pod is None:
            raise ConnectionError(f"no Ready {self.release} operator pod")
        (container,) = pod["spec"]["containers"]
        (port,) = (p for p in container.get("ports") or [] if p["name"] == port_name)
        return f"{pod['status']['podIP']}:{port['containerPort']}"

    @property
    def metrics_target(self) -> str:
        """host:port of the Ready pod's metrics endpoint (what Prometheus scrapes)."""
        return self.address(METRICS_PORT_NAME)

    def metrics(self) -> str:
        return signals.fetch_metrics(f"http://{self.metrics_target}/metrics")

    def metric(self, name: str, **labels: str) -> float:
        return signals.metric_sum(self.metrics(), name, **labels)

    def health(self, pod: dict[str, Any] | None = None) -> tuple[int, str]:
        """What /healthz of `pod` (default: the leader's) answers: status code and text."""
        return signals.health(f"http://{self.address(HEALTH_PORT_NAME, pod)}/healthz")

    def leading(self, pod: dict[str, Any] | None = None) -> bool:
        """Whether `pod` (default: the leader, else a Ready pod) says it leads."""
        url = f"http://{self.address(METRICS_PORT_NAME, pod)}/metrics"
        return signals.metric_sum(signals.fetch_metrics(url), "llmfleet_operator_leader") == 1

    def writes_since(
        self, since: datetime, namespace: str | None = None, *, leases: bool = False
    ) -> list[dict[str, Any]]:
        """Write requests the operator's pods made since `since` (from the audit log), without
        the leader's Lease renewals unless `leases`."""
        return signals.audit_writes(
            self.cluster.state_dir, self.username, since, namespace, leases=leases
        )

    @property
    def log_path(self) -> Path:
        """The Ready pod's log (its container's output, as the node runner writes it)."""
        return self.log()

    def _leading_pod(self) -> dict[str, Any] | None:
        if self._rolled_out() is None:
            return None
        pod = self.leader_pod()
        try:
            return pod if pod is not None and self.leading(pod) else None
        except OSError:
            return None

    def _rolled_out(self) -> dict[str, Any] | None:
        """A Ready pod, once the roll is over: as many pods as the Deployment asks for, all
        Ready and of its current template."""
        deployment = json.loads(
            self.cluster.kubectl(
                "get", "deployment", self.release, "-n", self.namespace, "-o", "json"
            )
        )
        want = deployment["spec"]["replicas"]
        status = deployment.get("status") or {}
        # Failed pods (evicted, or refused by a node) stay listed until collected, and are no
        # part of the roll: counting them waited for ever after a node refused an old pod.
        pods = [p for p in self.pods() if (p.get("status") or {}).get("phase") != "Failed"]
        ready = self.ready_pods()
        done = (
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == status.get("replicas") == want
            and len(pods) == len(ready) == want
        )
        return ready[0] if done and ready else None

    def pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component=operator"
        out = self.cluster.kubectl(
            "get", "pods", "-n", self.namespace, "-l", selector, "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def ready_pods(self) -> list[dict[str, Any]]:
        """The release's pods that are Running and Ready, and not being deleted."""
        out = []
        for pod in self.pods():
            status = pod.get("status") or {}
            ready = any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in status.get("conditions") or []
            )
            if (
                status.get("phase") == "Running"
                and ready
                and not pod["metadata"].get("deletionTimestamp")
            ):
                out.append(pod)
        return out

    def ready_pod(self) -> dict[str, Any] | None:
        return next(iter(self.ready_pods()), None)

    def uninstall(self) -> None:
        subprocess.run(
            [
                str(bindir("helm") / "helm"),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "uninstall",
                self.release,
                "--namespace",
                self.namespace,
                "--wait",
            ],
            check=False,
            capture_output=True,
        )

    def log_of(self, pod: dict[str, Any]) -> Path:
        """The node runner's log of `pod` (kept after the pod is gone)."""
        return self.cluster.state_dir / "pods" / f"{self.namespace}_{pod['metadata']['name']}.log"

    def log(self) -> Path:
        """The node runner's log of the operator pod (its container's output)."""
        pods = [p for p in [self.leader_pod() or self.ready_pod()] if p] or self.pods()
        name = pods[0]["metadata"]["name"] if pods else "none"
        return self.cluster.state_dir / "pods" / f"{self.namespace}_{name}.log"
