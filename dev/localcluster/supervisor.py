"""Starts, checks and stops the local control plane: each component is an upstream binary run as a
process of ours, bound to 127.0.0.1, with its pid and log under the cluster's state directory.

`Cluster` is the face of it; the jobs are in modules of their own: tools.py (the built binaries),
ports.py (addresses), processes.py (pidfiles, start, stop), commands.py (command lines),
kubeconfigs.py, httpwait.py, api.py (the supervisor's own API calls), nodes.py, and the add-ons
(addons.py: LeaderWorkerSet in lws_addon.py, KEDA in keda_addon.py). The metrics stack
(metricsstack/) and the operator build on a Cluster; down() stops them too, as every process
with a pidfile in the state directory."""

from __future__ import annotations

import contextlib
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import commands, httpwait, kubeconfigs, nodes, pki
from .addons import AddOn
from .api import Api
from .commands import HPA_SYNC_PERIOD, KWOK_GATE, UPSTREAM_HPA_SYNC_PERIOD
from .keda_addon import Keda
from .kwokgate import gated_stages
from .lws_addon import CONTROLLER, LeaderWorkerSet
from .nodes import Pool, load_profile
from .ports import CLUSTER_INDEX, POD_CIDR, RUNNER_POD_NETWORK, Ports
from .processes import CONTROL_PLANE_NICE, Processes, ahead_of_workloads
from .tools import BUILD_TOOLS, HERE, REPO, bindir, build, pinned_versions

DEFAULT_PROFILE = HERE / "profiles" / "default.yaml"
LWS_ENV, KEDA_ENV = LeaderWorkerSet.env, Keda.env
LWS = CONTROLLER  # the LeaderWorkerSet controller's pidfile, log and kubeconfig stem
KEDA = Keda.processes  # the same for KEDA's operator and metrics adapter
KEDA_OPERATOR, KEDA_ADAPTER = KEDA
# In start order; down() stops them newest first (KEDA before the API server it deregisters from).
COMPONENTS = (*commands.CONTROL_PLANE, *LeaderWorkerSet.processes, *Keda.processes)

__all__ = [  # the face's names, most of them defined in the modules above and used from here
    "BUILD_TOOLS",
    "CLUSTER_INDEX",
    "COMPONENTS",
    "CONTROL_PLANE_NICE",
    "DEFAULT_PROFILE",
    "HPA_SYNC_PERIOD",
    "KEDA",
    "KEDA_ADAPTER",
    "KEDA_ENV",
    "KEDA_OPERATOR",
    "KWOK_GATE",
    "LWS",
    "LWS_ENV",
    "POD_CIDR",
    "REPO",
    "RUNNER_POD_NETWORK",
    "UPSTREAM_HPA_SYNC_PERIOD",
    "AddOns",
    "Cluster",
    "Ports",
    "ahead_of_workloads",
    "bindir",
    "pinned_versions",
]


class AddOns(NamedTuple):
    lws: LeaderWorkerSet
    keda: Keda


@dataclass
class Cluster:
    state_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("LLMFLEET_CLUSTER_DIR", REPO / ".cluster"))
    )
    ports: Ports = field(default_factory=Ports)
    # Whether up() starts the LeaderWorkerSet controller (and installs its API) or removes both
    # (LLMFLEET_LWS=0 turns it off by default).
    lws: bool = field(default_factory=LeaderWorkerSet.by_default)
    # Whether up() starts KEDA (and installs its API) or removes both (LLMFLEET_KEDA=0).
    keda: bool = field(default_factory=Keda.by_default)
    # Whether up() starts kwok and its GPU node pools (LLMFLEET_KWOK=0: not on a machine whose
    # only node is the node runner's, as dev/gpulab's real-GPU machine).
    kwok: bool = field(default_factory=lambda: os.environ.get("LLMFLEET_KWOK", "1") != "0")

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

    @property
    def procs(self) -> Processes:
        return Processes(self.state_dir)

    @property
    def api(self) -> Api:
        return Api(self.server, self.pki_dir, self.kubeconfig)

    @property
    def addons(self) -> AddOns:
        """Its add-ons, each wanted or not (`lws`, `keda`): `cluster.addons.keda.state()`."""
        return AddOns(LeaderWorkerSet(self), Keda(self))

    def kubectl_path(self) -> Path:
        return self.api.kubectl_path()

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.api.kubectl(*args, input=input)

    # --- lifecycle -------------------------------------------------------------------------

    def up(self, profile: Path = DEFAULT_PROFILE, log: Callable[[str], None] = print) -> float:
        """Bring the cluster up (reusing whatever already runs); return the seconds it took."""
        start = time.monotonic()
        wanted = [a for a in self.addons if a.wanted]
        build("etcd", "kubernetes", *(["kwok"] if self.kwok else []), *(a.name for a in wanted))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pki.ensure(self.pki_dir)
        for name in (c.name for c in pki.CLIENTS):
            self._write_kubeconfig(name)
        self._start("etcd", self._etcd_cmd())
        self._wait_http(f"http://127.0.0.1:{self.ports.etcd_client}/health", "etcd")
        self._start("kube-apiserver", self._apiserver_cmd())
        self._wait_http(f"{self.server}/readyz", "kube-apiserver", auth=True)
        self._start("kube-controller-manager", self._controller_manager_cmd())
        kc = self._kubeconfig_for
        self._start("kube-scheduler", commands.scheduler(kc("scheduler"), self.ports))
        if self.kwok:
            stages = self.state_dir / "kwok-stages.yaml"
            stages.write_text(gated_stages((bindir("kwok") / "stages.yaml").read_text()))
            self._start("kwok", commands.kwok(kc("kwok"), stages, self.ports))
            self._start(KWOK_GATE, *commands.kwok_gate(kc("kwok")))
        # While the controller manager starts (its default ServiceAccount comes seconds later).
        for addon in self.addons:
            if addon.wanted:
                addon.install()
            elif addon.home.exists():
                addon.remove()  # installed by an earlier up() on this state directory
        if self.kwok:
            self.apply_nodes(load_profile(profile))
            self.wait_nodes_ready()
        self.api.wait_default_serviceaccount()
        for addon in wanted:
            addon.wait()
        took = time.monotonic() - start
        log(f"cluster up in {took:.1f}s; KUBECONFIG={self.kubeconfig}")
        return took

    def down(self) -> None:
        """Stop every process of this state directory, whoever started it (the control plane
        newest first), and leave no process behind."""
        # Processes started on top of the cluster (the operator, the node runner with its vLLM
        # pods, the metrics stack) go first, while the API server can still see them unregister.
        for name in self.procs.names():
            if name not in COMPONENTS:
                self._stop(name, grace=20)
        for name in reversed(COMPONENTS):
            self._stop(name)

    def wipe(self) -> None:
        self.down()
        subprocess.run(["rm", "-rf", str(self.state_dir)], check=True)

    def alive(self, name: str) -> bool:
        """Whether the process started under `name` (a component, "operator", ...) runs."""
        return self.procs.alive(name)

    def stop(self, name: str, grace: float = 10.0) -> None:
        """Stop the process started under `name`, if it runs."""
        self._stop(name, grace)

    def running(self) -> dict[str, bool]:
        """Whether each component of this cluster (an add-on's only when it is wanted) lives."""
        unwanted = {p for a in self.addons if not a.wanted for p in a.processes}
        if not self.kwok:
            unwanted |= {"kwok", KWOK_GATE}
        return {name: self.alive(name) for name in COMPONENTS if name not in unwanted}

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
        if any(any(a.alive().values()) for a in self.addons if not a.wanted):
            return False  # asked for a cluster without it
        return self.api.ready()

    @contextlib.contextmanager
    def without(self, addon: AddOn) -> Iterator[None]:
        """`addon` and its API absent inside the block (addon.remove()), and back after it when
        this cluster runs it: for tests of what happens on a cluster without it."""
        had = addon.wanted
        addon.remove()
        addon.wanted = False
        try:
            yield
        finally:
            addon.wanted = had
            if had:
                addon.start()

    def wait_established(self, crds: Iterable[str], timeout: float = 60) -> None:
        self.api.wait_established(crds, timeout)

    # --- the control plane's components ----------------------------------------------------

    def _etcd_cmd(self) -> list[str]:
        return commands.etcd(self.state_dir, self.ports)

    def _apiserver_cmd(self) -> list[str]:
        return commands.apiserver(self.pki_dir, self.ports, self.audit_log)

    def _controller_manager_cmd(self, hpa_sync_period: str = HPA_SYNC_PERIOD) -> list[str]:
        kubeconfig = self._kubeconfig_for("controller-manager")
        return commands.controller_manager(self.pki_dir, kubeconfig, self.ports, hpa_sync_period)

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

    # --- processes, kubeconfigs, waits (also for an API-server-only cluster) ----------------

    def _start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        """Start `cmd` under `name`, with `env` added to ours, unless it runs already."""
        self.procs.start(name, cmd, env)

    def _stop(self, name: str, grace: float = 10.0) -> None:
        self.procs.stop(name, grace)

    def _kubeconfig_for(self, name: str) -> Path:
        return kubeconfigs.path(self.state_dir, name)

    def _write_kubeconfig(self, name: str) -> None:
        kubeconfigs.write(self.state_dir, self.pki_dir, self.server, name)

    def _wait_http(
        self,
        url: str,
        what: str,
        auth: bool = False,
        timeout: float = 90,
        context: ssl.SSLContext | None = None,
    ) -> None:
        """Until `url` answers (as the admin if `auth`); RuntimeError once the process started
        under `what` exits."""
        ctx = self.api.context() if auth else context
        httpwait.wait(url, what, lambda: self.procs.check(what), ctx, timeout)

    # --- nodes: kwok's, and the node runner's local-gpu-0 (dev/localcluster/noderunner) -----
    # down() stops the runner through its pidfile, and every pod process goes with it (they
    # share its process group).

    def apply_nodes(self, pools: list[Pool]) -> None:
        nodes.apply(self.api, pools)

    def wait_nodes_ready(self, timeout: float = 60) -> None:
        """Wait until every kwok node is Ready (the node runner's node reports for itself)."""
        nodes.wait_kwok_ready(self.api, timeout)

    def start_node_runner(
        self, gpus: int = 4, pod_network: str = RUNNER_POD_NETWORK, timeout: float = 120
    ) -> str:
        """Start the local node `local-gpu-0` (vLLM installed first if needed: minutes, once);
        wait until it is Ready and return its name."""
        return nodes.start_runner(self.procs, self.api, gpus, pod_network, timeout)

    def start_dev_process(self, name: str, module: str, *args: str) -> None:
        """Run `python -m <module> --state-dir=<state dir> <args>` (a module of dev/) as a
        process of this cluster among the workloads (no control-plane priority), in a session of
        its own, with its log and pidfile under the state directory: `alive(name)` and
        `stop(name)` find it and down() stops it."""
        self.procs.start_dev(name, module, *args)

    def stop_node_runner(self) -> None:
        """Stop the runner and its pods' processes; it unregisters its node on the way out."""
        self._stop(nodes.RUNNER, grace=20)
