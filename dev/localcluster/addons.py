"""The add-ons of the local cluster, LeaderWorkerSet (lws_addon.py) and KEDA (keda_addon.py), in
one shape: an upstream project built by build-tools.sh, whose manifests (CRDs, RBAC, webhook
configurations or APIServices) the cluster applies pointed at 127.0.0.1 and whose controllers run
as processes of the cluster. Each is part of the cluster unless its Cluster field (`lws`, `keda`)
is off, as LLMFLEET_<NAME>=0 makes it; then its API is absent, as on a cluster where nobody
installed it.

What is common is here: starting (install, then wait until the API server reaches it and
discovery lists its groups), removal (its processes stopped, its objects deleted, and only once
discovery no longer lists its groups), its state. A subclass gives its data and what only it
does."""

from __future__ import annotations

import os
import shutil
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Protocol

from . import kubeconfigs, pki
from .api import Api
from .ports import Ports
from .processes import Processes
from .tools import bindir, build


class Cluster(Protocol):
    """What an add-on needs of its cluster (supervisor.Cluster, which imports this module)."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def pki_dir(self) -> Path: ...
    @property
    def ports(self) -> Ports: ...
    @property
    def server(self) -> str: ...
    @property
    def procs(self) -> Processes: ...
    @property
    def api(self) -> Api: ...


class AddOn(ABC):
    # build-tools.sh's tool, the state subdirectory, and the Cluster field that wants it.
    name: ClassVar[str]
    title: ClassVar[str]  # for people
    env: ClassVar[str]  # LLMFLEET_<NAME>: "0" starts the cluster without it
    processes: ClassVar[tuple[str, ...]]  # pidfile, log and kubeconfig stems, in start order
    groups: ClassVar[tuple[str, ...]]  # the API groups discovery lists while it is installed
    crd: ClassVar[str]  # its main CRD (state()'s crd-established)
    # Files it reads from its directory: (path in it, the file of pki.py's directory it copies).
    certificates: ClassVar[tuple[tuple[str, str], ...]]
    timeout: ClassVar[float]  # how long start() and up() wait for it by default

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @classmethod
    def by_default(cls) -> bool:
        return os.environ.get(cls.env, "1") != "0"

    @property
    def wanted(self) -> bool:
        """Whether the cluster runs it (up() installs it, or else removes it)."""
        return bool(getattr(self.cluster, self.name))

    @wanted.setter
    def wanted(self, on: bool) -> None:
        setattr(self.cluster, self.name, on)

    @property
    def home(self) -> Path:
        """Its configuration and certificates; present while the cluster has it."""
        return self.cluster.state_dir / self.name

    @property
    def config(self) -> Path:
        """Upstream's manifests, as build-tools.sh keeps them beside the binaries."""
        return bindir(self.name) / "config"

    def kubeconfig(self, process: str) -> Path:
        return kubeconfigs.path(self.cluster.state_dir, process)

    def alive(self) -> dict[str, bool]:
        return {name: self.cluster.procs.alive(name) for name in self.processes}

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Install it (its API, its processes started, or the running ones reused) and return
        once the API server reaches it and discovery lists its groups."""
        c = self.cluster
        build(self.name)
        pki.ensure(c.pki_dir)
        for name in self.processes:
            kubeconfigs.write(c.state_dir, c.pki_dir, c.server, name)
        self.install()
        self.wait(timeout)

    def install(self) -> None:
        """Apply its API and start its processes, unless they all run; return without waiting
        for them (wait()). Its kubeconfigs must be written."""
        if all(self.alive().values()):
            return
        config = self.config
        for relative, source in self.certificates:
            (self.home / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.cluster.pki_dir / source, self.home / relative)
        api = self.cluster.api
        api.apply_installed(self.crd_files(config), self.manifests(config))
        # Its controllers watch its kinds; started before a CRD is Established,
        # controller-runtime finds no such kind and retries that watch only after 10 s.
        api.wait_established(self.crd_names(config))
        self.launch(config)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until it serves (not_ready() says nothing is missing), then until discovery
        lists its groups; RuntimeError as soon as one of its processes exits."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name in self.processes:
                self.cluster.procs.check(name)
            last = self.not_ready()
            if not last:
                # The API server serves its kinds (or its APIService); discovery lists the
                # groups a few controller steps later (discovery.py).
                remaining = max(1.0, deadline - time.monotonic())
                self.cluster.api.wait_discovery(self.groups, True, remaining)
                return
            time.sleep(0.2)
        logs = ", ".join(str(self.cluster.procs.log(n)) for n in self.processes)
        raise TimeoutError(f"{self.title} not ready after {timeout}s ({last}); see {logs}")

    def remove(self) -> None:
        """Stop it and remove its API as if it had never been installed; return once the API
        server has forgotten it: no discovery endpoint lists its groups (and whatever
        wait_gone() waits for)."""
        config = self.config
        installed = config.exists()  # (else never built, so never installed)
        if installed:
            self.withdraw(config)
        for name in reversed(self.processes):
            self.cluster.procs.stop(name)
        if installed:
            self.delete(config)
            # Gone from etcd, not yet from the API server's caches (discovery.py).
            self.cluster.api.wait_discovery(self.groups, served=False)
            self.wait_gone()
        shutil.rmtree(self.home, ignore_errors=True)

    def state(self) -> dict[str, bool]:
        """What its users need, each True when in place: its processes (by name) and its main
        CRD (`crd-established`)."""
        return {**self.alive(), "crd-established": self.cluster.api.established(self.crd)}

    # --- what each add-on does its own way -------------------------------------------------

    @abstractmethod
    def crd_files(self, config: Path) -> list[Path]:
        """Upstream's CRD manifests, applied as they ship."""

    @abstractmethod
    def crd_names(self, config: Path) -> list[str]: ...

    @abstractmethod
    def manifests(self, config: Path) -> list[dict[str, Any]]:
        """What is applied with the CRDs: RBAC, webhook configurations, Services ..."""

    @abstractmethod
    def launch(self, config: Path) -> None:
        """Start its processes (its CRDs Established), and apply what must follow them."""

    @abstractmethod
    def not_ready(self) -> str:
        """What it still lacks to serve, for people; empty once it serves."""

    @abstractmethod
    def delete(self, config: Path) -> None:
        """Delete what install() applied (its processes stopped), returning once etcd has
        forgotten it."""

    def withdraw(self, config: Path) -> None:  # noqa: B027 - a hook, nothing by default
        """What must go while its processes still answer, before remove() stops them."""

    def wait_gone(self) -> None:  # noqa: B027 - a hook, nothing by default
        """After remove(), once discovery has forgotten it: whatever else it must wait for."""
