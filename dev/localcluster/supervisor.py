"""Starts, checks and stops the local control plane: each component is an upstream binary run as a
process of ours, bound to 127.0.0.1, with its pid and log under the cluster's state directory."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from . import discovery, keda, lws, pki
from .kwokgate import gated_stages
from .nodes import KWOK_ANNOTATION, Pool, load_profile, node_manifests

if TYPE_CHECKING:
    from .metricsstack import MetricsStack  # the metrics stack block below

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BUILD_TOOLS = HERE / "build-tools.sh"
DEFAULT_PROFILE = HERE / "profiles" / "default.yaml"

# Several local clusters can run side by side (a developer's and a clean-clone CI check): the
# index shifts every port by 1000 and the loopback pod networks by 10 in the second octet.
CLUSTER_INDEX = int(os.environ.get("LLMFLEET_CLUSTER_INDEX", "0"))
# Pod IPs come from here: loopback, so every dial of a pod IP stays on this machine.
POD_CIDR = f"127.{16 + 10 * CLUSTER_INDEX}.0.1/16"
# The node runner's pods (real processes) bind to addresses from here.
RUNNER_POD_NETWORK = f"127.{17 + 10 * CLUSTER_INDEX}.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # ClusterIPs are data only, never dialled
HPA_SYNC_PERIOD = "5s"  # shortened so scaling tests react quickly
UPSTREAM_HPA_SYNC_PERIOD = "15s"  # kube-controller-manager's default: what managed clusters run
# The local cluster puts on one machine what runs on separate ones: control-plane and
# metrics-stack machines that the engines' load cannot take CPU from. Here loaded engines, a
# router and clients on 2 cores starved the apiserver and the HPA loop (one HPA evaluation per
# ~40 s instead of per 5 s, handler timeouts), so these processes run ahead of the workloads.
CONTROL_PLANE_NICE = -10
# The LeaderWorkerSet controller (dev/localcluster/lws.py) starts with the cluster unless
# LLMFLEET_LWS=0 (or Cluster(lws=False)): then the LeaderWorkerSet API is absent, as on a cluster
# where nobody installed it.
LWS_ENV = "LLMFLEET_LWS"
LWS = "lws-controller"  # its pidfile, log and kubeconfig stem
KWOK_GATE = "kwok-gate"  # the kubelet's refusals for kwok's nodes (kwokgate.py)
# KEDA (dev/localcluster/keda.py: its operator and metrics adapter) starts with the cluster unless
# LLMFLEET_KEDA=0 (or Cluster(keda=False)): then the ScaledObject API and external.metrics.k8s.io
# are absent, as on a cluster where nobody installed KEDA.
KEDA_ENV = "LLMFLEET_KEDA"
KEDA_OPERATOR = keda.OPERATOR  # pidfile, log and kubeconfig stems
KEDA_ADAPTER = keda.ADAPTER
KEDA = (KEDA_OPERATOR, KEDA_ADAPTER)
KEDA_GROUPS = (keda.API_GROUP, keda.EXTERNAL_METRICS_GROUP)


def lws_by_default() -> bool:
    return os.environ.get(LWS_ENV, "1") != "0"


def keda_by_default() -> bool:
    return os.environ.get(KEDA_ENV, "1") != "0"


def ahead_of_workloads(cmd: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start `cmd` in a session of its own, ahead of the workloads: at CONTROL_PLANE_NICE
    (coreutils `nice` sets it before exec, so every thread and child has it) and with its
    session's scheduling group at the same nice.

    The group matters more than the process: with the kernel's autogroup scheduling
    (`kernel.sched_autogroup_enabled=1`, the default on this machine and on most desktop and
    VM kernels) the CPU is shared between sessions first, and a process's own nice only orders
    it within its session. A nice -10 process in a session of its own then got no more CPU than
    the node runner's session of busy engines at nice 10: a sampler at nice -10 went 5 s without
    running while the engines' model processes took 80 % of both cores."""
    proc = subprocess.Popen(
        ["nice", "-n", str(CONTROL_PLANE_NICE), *cmd], start_new_session=True, **popen
    )
    # Popen returns after the child's setsid and exec, so this is the new session's group.
    # No file without autogroup support; EPERM without CAP_SYS_NICE (then, like `nice`, it
    # runs as it is).
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/autogroup").write_text(str(CONTROL_PLANE_NICE))
    return proc


@dataclass(frozen=True)
class Ports:
    apiserver: int = 16443 + 1000 * CLUSTER_INDEX
    etcd_client: int = 12379 + 1000 * CLUSTER_INDEX
    etcd_peer: int = 12380 + 1000 * CLUSTER_INDEX
    controller_manager: int = 10257 + 1000 * CLUSTER_INDEX
    scheduler: int = 10259 + 1000 * CLUSTER_INDEX
    kwok: int = 10247 + 1000 * CLUSTER_INDEX
    lws_webhook: int = 10263 + 1000 * CLUSTER_INDEX
    lws_metrics: int = 10264 + 1000 * CLUSTER_INDEX
    lws_health: int = 10265 + 1000 * CLUSTER_INDEX
    keda_metrics: int = 10266 + 1000 * CLUSTER_INDEX  # operator's Prometheus metrics
    keda_health: int = 10267 + 1000 * CLUSTER_INDEX  # operator's /healthz, /readyz
    keda_grpc: int = 10268 + 1000 * CLUSTER_INDEX  # operator's metrics service (adapter's gRPC)
    keda_adapter: int = 10269 + 1000 * CLUSTER_INDEX  # external.metrics.k8s.io (HTTPS)
    keda_adapter_metrics: int = 10270 + 1000 * CLUSTER_INDEX  # adapter's Prometheus metrics

    @classmethod
    def shifted(cls, by: int) -> Ports:
        """Every port `by` higher: a second cluster beside the shared one (a test's own)."""
        base = cls()
        return cls(**{f.name: getattr(base, f.name) + by for f in dataclasses.fields(cls)})


def bindir(component: str) -> Path:
    out = subprocess.run(
        [str(BUILD_TOOLS), "--bindir", component], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out)


def pinned_versions() -> dict[str, str]:
    out = subprocess.run(
        [str(BUILD_TOOLS), "--versions"], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in out.split())


@dataclass
class Cluster:
    state_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("LLMFLEET_CLUSTER_DIR", REPO / ".cluster"))
    )
    ports: Ports = field(default_factory=Ports)
    # Whether up() starts the LeaderWorkerSet controller (and installs its API) or removes both.
    lws: bool = field(default_factory=lws_by_default)
    # Whether up() starts KEDA (and installs its API) or removes both.
    keda: bool = field(default_factory=keda_by_default)

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def kubectl_path(self) -> Path:
        return bindir("kubernetes") / "kubectl"

    # --- lifecycle -------------------------------------------------------------------------

    def up(self, profile: Path = DEFAULT_PROFILE, log: Callable[[str], None] = print) -> float:
        """Bring the cluster up (reusing whatever already runs); return the seconds it took."""
        start = time.monotonic()
        tools = [
            "etcd",
            "kubernetes",
            "kwok",
            *(["lws"] if self.lws else []),
            *(["keda"] if self.keda else []),
        ]
        subprocess.run([str(BUILD_TOOLS), *tools], check=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki.ensure(self.pki_dir)
        for name in (c.name for c in pki.CLIENTS):
            self._write_kubeconfig(name)
        self._start("etcd", self._etcd_cmd())
        self._wait_http(f"http://127.0.0.1:{self.ports.etcd_client}/health", "etcd")
        self._start("kube-apiserver", self._apiserver_cmd())
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", auth=True)
        self._start("kube-controller-manager", self._controller_manager_cmd())
        self._start("kube-scheduler", self._scheduler_cmd())
        self._kwok_stages.write_text(gated_stages((bindir("kwok") / "stages.yaml").read_text()))
        self._start("kwok", self._kwok_cmd())
        # The kubelet's refusals (a missing Secret, ConfigMap) for kwok's nodes (kwokgate.py).
        self._start(
            KWOK_GATE,
            [
                sys.executable,
                "-m",
                "localcluster.kwokgate",
                f"--kubeconfig={self._kubeconfig_for('kwok')}",
            ],
            env={"PYTHONPATH": str(HERE.parent)},
        )
        # While the controller manager starts (its default ServiceAccount comes seconds later).
        if self.lws:
            self._install_lws()
        elif self.lws_dir.exists():
            self.remove_lws()  # installed by an earlier up() on this state directory
        if self.keda:
            self._install_keda()
        elif self.keda_dir.exists():
            self.remove_keda()
        self.apply_nodes(load_profile(profile))
        self.wait_nodes_ready()
        self._wait_default_serviceaccount()
        if self.lws:
            self._wait_lws()
        if self.keda:
            self._wait_keda()
        took = time.monotonic() - start
        log(f"cluster up in {took:.1f}s; KUBECONFIG={self.kubeconfig}")
        return took

    def down(self) -> None:
        """Stop every component (newest first) and leave no process behind."""
        # Processes started on top of the cluster (the operator, the node runner with its vLLM
        # pods) go first, while the API server can still see them unregister.
        for pidfile in self.state_dir.glob("*.pid"):
            if pidfile.stem not in COMPONENTS:
                self._stop(pidfile.stem, grace=20)
        for name in reversed(COMPONENTS):
            self._stop(name)

    def wipe(self) -> None:
        self.down()
        subprocess.run(["rm", "-rf", str(self.state_dir)], check=True)

    def alive(self, name: str) -> bool:
        """Whether the process started under `name` (a component, "operator", ...) runs."""
        return self._alive(name)

    def stop(self, name: str, grace: float = 10.0) -> None:
        """Stop the process started under `name`, if it runs."""
        self._stop(name, grace)

    def running(self) -> dict[str, bool]:
        """Whether each component of this cluster (the LWS controller only with `lws`, KEDA's
        operator and adapter only with `keda`) lives."""
        return {
            name: self._alive(name)
            for name in COMPONENTS
            if (self.lws or name != LWS) and (self.keda or name not in KEDA)
        }

    def ensure_up(self) -> bool:
        """Reuse this cluster if it runs healthy, else start it afresh; whether it was started
        (then the caller stops it when done)."""
        if self.healthy():
            return False
        self.down()
        self.up()
        return True

    def healthy(self) -> bool:
        if not all(self.running().values()):
            return False
        if not self.lws and self._alive(LWS):
            return False  # asked for a cluster without LeaderWorkerSet
        if not self.keda and any(self._alive(n) for n in KEDA):
            return False  # asked for a cluster without KEDA
        try:
            self._get(f"{self.server}/readyz", auth=True)
        except (OSError, urllib.error.URLError):
            return False
        return True

    # --- LeaderWorkerSet controller (dev/localcluster/lws.py) -------------------------------
    # Part of the cluster unless `lws` is off; in COMPONENTS, so down() stops it first.

    @property
    def lws_dir(self) -> Path:
        """Its configuration and serving certificate; present while the cluster has LWS."""
        return self.state_dir / "lws"

    def start_lws(self, timeout: float = 60) -> None:
        """Install the LeaderWorkerSet API (CRD, RBAC, webhook configurations) and start its
        controller, or reuse the running one; return once the API server's calls through every
        LWS webhook succeed."""
        subprocess.run([str(BUILD_TOOLS), "lws"], check=True)
        pki.ensure(self.pki_dir)
        self._write_kubeconfig(LWS)
        self._install_lws()
        self._wait_lws(timeout)

    def remove_lws(self) -> None:
        """Stop the controller and remove the LeaderWorkerSet API as if it had never been
        installed: its webhook configurations, RBAC and CRD (and with it every LeaderWorkerSet;
        the garbage collector removes their StatefulSets). Returns once the API server has
        forgotten both: no discovery endpoint lists the group and pods pass no LWS webhook."""
        self._stop(LWS)
        config = bindir("lws") / "config"
        if config.exists():  # (else never built, so never installed)
            self.kubectl(
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
                *lws.webhook_names(config),
                *lws.rbac_names(config),
                f"customresourcedefinition/{lws.CRD_NAME}",
            )
            # Gone from etcd, not yet from the API server's caches (discovery.py).
            self._wait_discovery([lws.API_GROUP], served=False)
            self._wait_lws_webhooks_gone()
        shutil.rmtree(self.lws_dir, ignore_errors=True)

    @contextlib.contextmanager
    def without_lws(self) -> Iterator[None]:
        """The LeaderWorkerSet API absent inside the block (remove_lws), and back after it when
        this cluster runs it: for tests of what happens on a cluster without it."""
        had = self.lws
        self.remove_lws()
        self.lws = False
        try:
            yield
        finally:
            self.lws = had
            if had:
                self.start_lws()

    def _install_lws(self) -> None:
        if self._alive(LWS):
            return
        config = bindir("lws") / "config"
        certs = self.lws_dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        # controller-runtime's webhook server reads tls.crt and tls.key from its certDir.
        shutil.copyfile(self.pki_dir / "lws-webhook.crt", certs / "tls.crt")
        shutil.copyfile(self.pki_dir / "lws-webhook.key", certs / "tls.key")
        p = self.ports
        cfg = self.lws_dir / "config.yaml"
        cfg.write_text(
            lws.controller_config(
                p.lws_webhook, certs, f"127.0.0.1:{p.lws_metrics}", f"127.0.0.1:{p.lws_health}"
            )
        )
        ca = base64.b64encode((self.pki_dir / "ca.crt").read_bytes()).decode()
        docs = [
            *lws.rbac(config),
            *lws.webhook_configurations(config, f"https://127.0.0.1:{p.lws_webhook}", ca),
        ]
        self._apply_installed([lws.crd_file(config)], docs)
        # Started before the CRD is Established, controller-runtime finds no such kind and
        # retries its LeaderWorkerSet watch only after 10 s.
        self.wait_established([lws.CRD_NAME])
        binary = bindir("lws") / "lws-controller-manager"
        self._start(LWS, lws.command(binary, self._kubeconfig_for(LWS), cfg))

    def _wait_lws(self, timeout: float = 60) -> None:
        """Wait until a server-side dry run of a LeaderWorkerSet and of a worker pod passes the
        LWS webhooks, the pod coming back with LWS_LEADER_ADDRESS injected: the CRD is
        Established and the API server reaches the controller's webhooks and trusts them."""
        deadline = time.monotonic() + timeout
        body = "\n---\n".join(yaml.safe_dump(d) for d in lws.probe("default"))
        last = ""
        while time.monotonic() < deadline:
            pid = self._pid(LWS)
            if pid is None or not _pid_exists(pid):
                raise RuntimeError(f"{LWS} exited; see {self.state_dir / (LWS + '.log')}")
            try:
                out = self.kubectl("create", "--dry-run=server", "-o=json", "-f=-", input=body)
            except subprocess.CalledProcessError as e:
                last = (e.stderr or "").strip()
                time.sleep(0.2)
                continue
            pod = next(o for o in _json_stream(out) if o["kind"] == "Pod")
            env = {e["name"] for e in pod["spec"]["containers"][0].get("env", [])}
            if "LWS_LEADER_ADDRESS" in env:
                # The dry run reaches the CRD's handler; discovery lists the group a few
                # controller steps later (discovery.py).
                self._wait_discovery([lws.API_GROUP], True, max(1.0, deadline - time.monotonic()))
                return
            last = f"the pod webhook injected no LWS_LEADER_ADDRESS: {sorted(env)}"
            time.sleep(0.2)
        raise TimeoutError(
            f"LeaderWorkerSet webhooks not serving after {timeout}s: {last}; "
            f"see {self.state_dir / (LWS + '.log')}"
        )

    def _wait_lws_webhooks_gone(self, timeout: float = 60) -> None:
        """Wait until a server-side dry run of a pod the LWS pod webhooks would take passes
        without them: the API server's webhook informer has seen the configurations go (with
        failurePolicy Fail and the controller stopped, a webhook it still knows refuses it)."""
        deadline = time.monotonic() + timeout
        pod = yaml.safe_dump(lws.probe("default")[1])
        while True:
            try:
                self.kubectl("create", "--dry-run=server", "-o=name", "-f=-", input=pod)
                return
            except subprocess.CalledProcessError as e:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"LeaderWorkerSet webhooks still called after {timeout}s: {e.stderr}"
                    ) from None
                time.sleep(0.1)

    # --- end of LeaderWorkerSet block -------------------------------------------------------

    # --- KEDA (dev/localcluster/keda.py): operator and metrics adapter ------------------------
    # Part of the cluster unless `keda` is off; in COMPONENTS, so down() stops both first.

    @property
    def keda_dir(self) -> Path:
        """Their certificates; present while the cluster has KEDA."""
        return self.state_dir / "keda"

    def start_keda(self, timeout: float = 90) -> None:
        """Install KEDA's API (CRDs, RBAC, the external.metrics.k8s.io APIService) and start its
        operator and metrics adapter, or reuse the running ones; return once ScaledObjects can
        be created, the operator is ready and the APIService is Available."""
        subprocess.run([str(BUILD_TOOLS), "keda"], check=True)
        pki.ensure(self.pki_dir)
        for name in KEDA:
            self._write_kubeconfig(name)
        self._install_keda()
        self._wait_keda(timeout)

    def remove_keda(self) -> None:
        """Stop KEDA and remove its API as if it had never been installed: the APIService, its
        CRDs (and with them every ScaledObject; the garbage collector removes the HPAs they
        own), RBAC and the namespace `keda`. Returns once they are gone and no discovery
        endpoint lists keda.sh or external.metrics.k8s.io. Targets stay at the replicas KEDA
        left them at (upstream's default, restoreToOriginalReplicaCount off)."""
        config = bindir("keda") / "config"
        if config.exists():  # (else never built, so never installed)
            # First, while the adapter still answers: an APIService whose backend is gone
            # fails discovery of its group, which stalls namespace deletion cluster-wide.
            self.kubectl("delete", "--ignore-not-found", f"apiservice/{keda.APISERVICE}")
        for name in reversed(KEDA):
            self._stop(name)
        if config.exists():
            crds = keda.crd_names(config)
            # The operator puts finalizers on ScaledObjects and ScaledJobs; it no longer runs
            # to remove them, and the CRDs' deletion would wait on them forever.
            with contextlib.suppress(subprocess.CalledProcessError):
                got = json.loads(self.kubectl("get", ",".join(crds), "-A", "-o", "json"))
                for obj in got["items"]:
                    if obj["metadata"].get("finalizers"):
                        group = obj["apiVersion"].split("/")[0]
                        self.kubectl(
                            "patch",
                            f"{obj['kind'].lower()}.{group}/{obj['metadata']['name']}",
                            "-n",
                            obj["metadata"]["namespace"],
                            "--type=merge",
                            "-p",
                            '{"metadata":{"finalizers":null}}',
                        )
            self.kubectl(
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
                *(f"customresourcedefinition/{c}" for c in crds),
            )
            self.kubectl(
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s",
                "-f",
                "-",
                input="\n---\n".join(yaml.safe_dump(d) for d in reversed(keda.rbac(config))),
            )
            # Gone from etcd, not yet from the API server's caches (discovery.py).
            self._wait_discovery(KEDA_GROUPS, served=False)
        shutil.rmtree(self.keda_dir, ignore_errors=True)

    @contextlib.contextmanager
    def without_keda(self) -> Iterator[None]:
        """KEDA and its API absent inside the block (remove_keda), and back after it when this
        cluster runs it: for tests of what happens on a cluster without it."""
        had = self.keda
        self.remove_keda()
        self.keda = False
        try:
            yield
        finally:
            self.keda = had
            if had:
                self.start_keda()

    def keda_state(self) -> dict[str, bool]:
        """What a ScaledObject needs, each True when in place: the processes (`keda-operator`,
        `keda-metrics-apiserver`), the operator's readiness (`operator-ready`), the CRD
        (`crd-established`) and the APIService (`apiservice-available`)."""
        state = {name: self._alive(name) for name in KEDA}
        try:
            self._get(f"http://127.0.0.1:{self.ports.keda_health}/readyz")
            state["operator-ready"] = True
        except (OSError, urllib.error.URLError):
            state["operator-ready"] = False
        for key, url, cond in (
            ("crd-established", self._crd_url(keda.CRD_NAME), "Established"),
            ("apiservice-available", self._apiservice_url(keda.APISERVICE), "Available"),
        ):
            try:
                state[key] = _condition(json.loads(self._get(url, auth=True)), cond)
            except (OSError, urllib.error.URLError):
                state[key] = False
        return state

    def _install_keda(self) -> None:
        if all(self._alive(n) for n in KEDA):
            return
        config = bindir("keda") / "config"
        certs, cas = self.keda_dir / "certs", self.keda_dir / "ca"
        certs.mkdir(parents=True, exist_ok=True)
        cas.mkdir(parents=True, exist_ok=True)
        # Both read ca.crt, tls.crt and tls.key from their --cert-dir (upstream's Secret
        # kedaorg-certs, mounted at /certs).
        shutil.copyfile(self.pki_dir / "ca.crt", certs / "ca.crt")
        shutil.copyfile(self.pki_dir / "keda.crt", certs / "tls.crt")
        shutil.copyfile(self.pki_dir / "keda.key", certs / "tls.key")
        # What its scalers trust besides the system CAs: every file in --ca-dir is read as one.
        shutil.copyfile(self.pki_dir / "ca.crt", cas / "ca.crt")
        p = self.ports
        docs = [*keda.rbac(config), *keda.adapter_service(p.keda_adapter)]
        self._apply_installed(keda.crd_files(config), docs)
        # The operator watches every KEDA kind; started before a CRD is Established,
        # controller-runtime finds no such kind and retries that watch only after 10 s.
        self.wait_established(keda.crd_names(config))
        binaries = bindir("keda")
        self._start(
            KEDA_OPERATOR,
            keda.operator_command(
                binaries / "keda",
                self._kubeconfig_for(KEDA_OPERATOR),
                certs,
                cas,
                metrics=f"127.0.0.1:{p.keda_metrics}",
                health=f"127.0.0.1:{p.keda_health}",
                grpc=f"127.0.0.1:{p.keda_grpc}",
            ),
            keda.environment(self._kubeconfig_for(KEDA_OPERATOR)),
        )
        self._start(
            KEDA_ADAPTER,
            keda.adapter_command(
                binaries / "keda-adapter",
                self._kubeconfig_for(KEDA_ADAPTER),
                certs,
                self.pki_dir / "ca.crt",
                p.keda_adapter,
                p.keda_adapter_metrics,
                grpc=f"127.0.0.1:{p.keda_grpc}",
            ),
            keda.environment(self._kubeconfig_for(KEDA_ADAPTER)),
        )
        # Registered once the adapter is on its way: until it answers, discovery of the group
        # fails for every client of the API server.
        ca = base64.b64encode((self.pki_dir / "ca.crt").read_bytes()).decode()
        self._apply_installed([], [keda.apiservice(p.keda_adapter, ca)])

    def _wait_keda(self, timeout: float = 90) -> None:
        """Wait until the operator is ready and listens for the adapter, and the aggregator
        finds the adapter's APIService Available (it reached the adapter with TLS and the front
        proxy's certificate). The adapter answers discovery without the operator; a metric
        read goes through to it, hence the gRPC port."""
        deadline = time.monotonic() + timeout
        p = self.ports
        last = ""
        while time.monotonic() < deadline:
            for name in KEDA:
                pid = self._pid(name)
                if pid is None or not _pid_exists(pid):
                    raise RuntimeError(f"{name} exited; see {self.state_dir / (name + '.log')}")
            state = self.keda_state()
            try:
                with socket.create_connection(("127.0.0.1", p.keda_grpc), timeout=1):
                    state["grpc"] = True
            except OSError:
                state["grpc"] = False
            if all(state.values()):
                # Available and Established are conditions; discovery follows them in
                # controller steps of its own (discovery.py).
                self._wait_discovery(KEDA_GROUPS, True, max(1.0, deadline - time.monotonic()))
                return
            last = ", ".join(k for k, v in state.items() if not v)
            time.sleep(0.2)
        raise TimeoutError(
            f"KEDA not ready after {timeout}s (not yet: {last}); see "
            f"{self.state_dir / (KEDA_OPERATOR + '.log')} and {KEDA_ADAPTER}.log"
        )

    def _apply_installed(self, files: Iterable[Path], docs: list[dict[str, Any]]) -> None:
        """Server-side apply, in one kubectl, of what the cluster installs for a component:
        upstream's manifest `files` as they ship (CRDs of a megabyte and more, which kubectl
        reads faster than PyYAML would) and our `docs` from stdin."""
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=llmfleet-localcluster",
            *(a for f in files for a in ("-f", str(f))),
            "-f",
            "-",
            input="\n---\n".join(yaml.safe_dump(d) for d in docs),
        )

    def wait_established(self, crds: Iterable[str], timeout: float = 60) -> None:
        """Wait until every CRD in `crds` is Established. (Not `kubectl wait`: it fails on a
        CRD that has no conditions yet.)"""
        deadline = time.monotonic() + timeout
        for crd in crds:
            while not _condition(
                json.loads(self._get(self._crd_url(crd), auth=True)), "Established"
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {crd} not Established after {timeout:.0f} s")
                time.sleep(0.05)

    def _wait_discovery(self, groups: Iterable[str], served: bool, timeout: float = 60) -> None:
        """Until discovery lists every group in `groups` (served), or none of them."""

        def get(path: str, accept: str) -> bytes:
            return self._get(f"{self.server}{path}", auth=True, accept=accept)

        discovery.wait(get, groups, served, timeout)

    def _crd_url(self, name: str) -> str:
        return f"{self.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

    def _apiservice_url(self, name: str) -> str:
        return f"{self.server}/apis/apiregistration.k8s.io/v1/apiservices/{name}"

    # --- end of KEDA block ------------------------------------------------------------------

    # --- node runner: optional local node whose pods really run (dev/localcluster/noderunner) -
    # One block, owned by the data-plane tests. down() stops the runner through its pidfile, and
    # every pod process goes with it (they share its process group).

    def start_node_runner(
        self, gpus: int = 4, pod_network: str = RUNNER_POD_NETWORK, timeout: float = 120
    ) -> str:
        """Start the local node `local-gpu-0` (vLLM installed first if needed: minutes, once);
        wait until it is Ready and return its name."""
        name, node = "node-runner", "local-gpu-0"
        install = REPO / "dev" / "dataplane" / "install-vllm.sh"
        venv = subprocess.run([str(install)], check=True, stdout=subprocess.PIPE, text=True)
        if not self._alive(name):
            self.start_dev_process(
                name,
                "localcluster.noderunner",
                f"--vllm-venv={venv.stdout.strip().splitlines()[-1]}",
                f"--gpus={gpus}",
                f"--pod-network={pod_network}",
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self._pid(name)  # (not _alive: right after fork the cmdline is still ours)
            if pid is None or not _pid_exists(pid):
                raise RuntimeError(f"node runner exited; see {self.state_dir / (name + '.log')}")
            with contextlib.suppress(subprocess.CalledProcessError):
                got = json.loads(self.kubectl("get", "node", node, "-o", "json"))
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in got["status"].get("conditions", [])
                ):
                    return node
            time.sleep(0.5)
        raise TimeoutError(f"node {node} not Ready after {timeout}s; see {name}.log")

    def start_dev_process(self, name: str, module: str, *args: str) -> None:
        """Run `python -m <module> --state-dir=<state dir> <args>` (a module of dev/) as a
        process of this cluster among the workloads (no control-plane priority), in a session of
        its own, with its log and pidfile under the state directory: `alive(name)` and
        `stop(name)` find it and down() stops it."""
        import sys

        cmd = [sys.executable, "-m", module, f"--state-dir={self.state_dir}", *args]
        with open(self.state_dir / f"{name}.log", "ab") as logf:
            proc = subprocess.Popen(
                cmd,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.state_dir,
                env={**os.environ, "PYTHONPATH": str(HERE.parent)},
            )
        self._pidfile(name).write_text(str(proc.pid))

    def stop_node_runner(self) -> None:
        """Stop the runner and its pods' processes; it unregisters its node on the way out."""
        self._stop("node-runner", grace=20)

    # --- end of node runner block -----------------------------------------------------------

    # --- metrics stack: Prometheus, prometheus-adapter, kube-state-metrics --------------------
    # One block, owned by the autoscaling tests (dev/localcluster/metricsstack). down() stops
    # the stack through its pidfile (metrics-stack.pid); on SIGTERM the stack removes its
    # custom.metrics.k8s.io APIServices before its processes exit.

    def start_metrics_stack(self) -> MetricsStack:
        """Start (or reuse) the metrics stack; the HPA controller can read
        custom.metrics.k8s.io once this returns. Its Prometheus is `.prometheus_url`."""
        from .metricsstack import MetricsStack

        return MetricsStack(self).start()

    def stop_metrics_stack(self) -> None:
        from .metricsstack import MetricsStack

        MetricsStack(self).stop()

    # --- end of metrics stack block ---------------------------------------------------------

    # --- nodes ------------------------------------------------------------------------------

    def apply_nodes(self, pools: list[Pool]) -> None:
        docs = [n for p in pools for n in node_manifests(p)]
        self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=llmfleet-localcluster",
            "-f",
            "-",
            input="\n---\n".join(yaml.safe_dump(d) for d in docs),
        )

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return subprocess.run(
            [str(self.kubectl_path()), f"--kubeconfig={self.kubeconfig}", *args],
            check=True,
            capture_output=True,
            text=True,
            input=input,
        ).stdout

    # --- commands ---------------------------------------------------------------------------

    def _etcd_cmd(self) -> list[str]:
        p = self.ports
        return [
            str(bindir("etcd") / "etcd"),
            "--name=local",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
            f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-cluster=local=http://127.0.0.1:{p.etcd_peer}",
            # A throwaway test store: durability buys nothing and fsync costs seconds per test.
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ]

    def _apiserver_cmd(self) -> list[str]:
        k = self.pki_dir
        return [
            str(bindir("kubernetes") / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            f"--tls-cert-file={k / 'apiserver.crt'}",
            f"--tls-private-key-file={k / 'apiserver.key'}",
            f"--client-ca-file={k / 'ca.crt'}",
            f"--service-account-key-file={k / 'sa.pub'}",
            f"--service-account-signing-key-file={k / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # The aggregation layer (custom.metrics.k8s.io for the HPA) needs a front proxy.
            f"--requestheader-client-ca-file={k / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--proxy-client-cert-file={k / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={k / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            # Every write, with who made it: tests count the operator's API writes from here.
            f"--audit-policy-file={HERE / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--profiling=false",
            "--v=1",
        ]

    @contextlib.contextmanager
    def hpa_sync_period(self, period: str) -> Iterator[None]:
        """Run the controller manager with `--horizontal-pod-autoscaler-sync-period=period`
        inside the block and with the tests' HPA_SYNC_PERIOD again after it: a benchmark
        measures with production's period, the tests keep their short one."""
        self._restart_controller_manager(period)
        try:
            yield
        finally:
            self._restart_controller_manager(HPA_SYNC_PERIOD)

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again (etcd keeps the state), returning once it is
        ready: every client's watches and connections break meanwhile, as in an upgrade."""
        self._stop("kube-apiserver")
        self._start("kube-apiserver", self._apiserver_cmd())
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", auth=True)

    def _restart_controller_manager(self, hpa_sync_period: str) -> None:
        name = "kube-controller-manager"
        self._stop(name)
        self._start(name, self._controller_manager_cmd(hpa_sync_period))
        # Its serving certificate is self-signed (no --tls-cert-file); /healthz needs no client
        # identity. Loopback only.
        self._wait_http(
            f"https://127.0.0.1:{self.ports.controller_manager}/healthz",
            name,
            timeout=60,
            context=ssl._create_unverified_context(),
        )

    def _controller_manager_cmd(self, hpa_sync_period: str = HPA_SYNC_PERIOD) -> list[str]:
        k = self.pki_dir
        kc = str(self._kubeconfig_for("controller-manager"))
        return [
            str(bindir("kubernetes") / "kube-controller-manager"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.controller_manager}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={k / 'sa.key'}",
            f"--root-ca-file={k / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Every default controller (garbage collector, deployment, replicaset, job, HPA,
            # disruption, namespace, serviceaccount-token ...); no node IPAM: pod IPs are kwok's.
            "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            f"--horizontal-pod-autoscaler-sync-period={hpa_sync_period}",
            "--profiling=false",
            "--v=1",
        ]

    def _scheduler_cmd(self) -> list[str]:
        kc = str(self._kubeconfig_for("scheduler"))
        return [
            str(bindir("kubernetes") / "kube-scheduler"),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.scheduler}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=1",
        ]

    @property
    def _kwok_stages(self) -> Path:
        """Upstream's fast Stages, pod-ready gated on the kwok gate's admission."""
        return self.state_dir / "kwok-stages.yaml"

    def _kwok_cmd(self) -> list[str]:
        return [
            str(bindir("kwok") / "kwok"),
            f"--kubeconfig={self._kubeconfig_for('kwok')}",
            f"--config={self._kwok_stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
        ]

    # --- process plumbing -------------------------------------------------------------------

    def _pidfile(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def _alive(self, name: str) -> bool:
        pid = self._pid(name)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A reused pid would not carry our state directory on its command line.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.state_dir).encode() in cmdline or name.encode() in cmdline

    def _pid(self, name: str) -> int | None:
        try:
            return int(self._pidfile(name).read_text())
        except (OSError, ValueError):
            return None

    def _start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        """Start `cmd` under `name`, with `env` added to ours, unless it runs already."""
        if self._alive(name):
            return
        logf = open(self.state_dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        proc = ahead_of_workloads(
            cmd,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.state_dir,
            env={**os.environ, **(env or {})},
        )
        logf.close()
        self._pidfile(name).write_text(str(proc.pid))

    def _stop(self, name: str, grace: float = 10.0) -> None:
        """SIGTERM the process group started under `name`, SIGKILL what is left after `grace`,
        and return only when no process of the group lives: the leader may exit before the
        children it was stopping (the node runner before its vLLM engines)."""
        pid = self._pid(name)
        if pid is not None and self._alive(name):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and _group_alive(pid):
                time.sleep(0.1)
            if _group_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                while _group_alive(pid):
                    time.sleep(0.05)
        self._pidfile(name).unlink(missing_ok=True)

    def _kubeconfig_for(self, name: str) -> Path:
        return self.state_dir / f"{name}.kubeconfig"

    def _write_kubeconfig(self, name: str) -> None:
        k = self.pki_dir
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "llmfleet-local",
                    "cluster": {"server": self.server, "certificate-authority": str(k / "ca.crt")},
                }
            ],
            "users": [
                {
                    "name": name,
                    "user": {
                        "client-certificate": str(k / f"{name}.crt"),
                        "client-key": str(k / f"{name}.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "llmfleet-local", "context": {"cluster": "llmfleet-local", "user": name}}
            ],
            "current-context": "llmfleet-local",
        }
        text = yaml.safe_dump(cfg, sort_keys=True)
        self._kubeconfig_for(name).write_text(text)
        if name == "admin":
            self.kubeconfig.write_text(text)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def _get(
        self,
        url: str,
        auth: bool = False,
        context: ssl.SSLContext | None = None,
        accept: str | None = None,
    ) -> bytes:
        ctx = self._ssl_context() if auth else context
        req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
            body: bytes = resp.read()
            return body

    def _wait_http(
        self,
        url: str,
        what: str,
        auth: bool = False,
        timeout: float = 90,
        context: ssl.SSLContext | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            pid = self._pid(what)
            if pid is None or not _pid_exists(pid):
                raise RuntimeError(f"{what} exited; see {self.state_dir / (what + '.log')}")
            try:
                self._get(url, auth=auth, context=context)
                return
            except (OSError, urllib.error.URLError) as e:
                last = e
                time.sleep(0.2)
        raise TimeoutError(f"{what} not ready at {url} after {timeout}s: {last}")

    def wait_nodes_ready(self, timeout: float = 60) -> None:
        """Wait until every kwok node is Ready (the node runner's node reports for itself)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = [
                n
                for n in json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
                if (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"
            ]
            ready = [
                n
                for n in nodes
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions", [])
                )
            ]
            if nodes and len(ready) == len(nodes):
                return
            time.sleep(0.3)
        raise TimeoutError("nodes not Ready; see kwok.log")

    def _wait_default_serviceaccount(self, timeout: float = 60) -> None:
        # Pods can't be created in a namespace until its default ServiceAccount exists.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.kubectl("get", "serviceaccount", "default", "-n", "default")
                return
            except subprocess.CalledProcessError:
                time.sleep(0.3)
        raise TimeoutError("default ServiceAccount never appeared; see kube-controller-manager.log")


# In start order; down() stops them newest first (KEDA before the API server it deregisters from).
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    KWOK_GATE,
    LWS,
    KEDA_OPERATOR,
    KEDA_ADAPTER,
)


def _condition(obj: dict[str, Any], kind: str) -> bool:
    """Whether `obj` has the status condition `kind` True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _json_stream(text: str) -> Iterator[dict[str, Any]]:
    """The objects of kubectl's `-o json` output for several objects: one JSON document each."""
    decoder, pos = json.JSONDecoder(), 0
    while pos < len(text.rstrip()):
        obj, end = decoder.raw_decode(text, pos)
        yield obj
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1


def _group_alive(pgid: int) -> bool:
    """Whether a process of process group `pgid` lives (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own unreaped child) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
