"""A cluster the lab did not start, named by a kubeconfig (the tests' `--kubeconfig`): used as it
is, through that kubeconfig alone. Nothing here starts, stops or reads a process or a file of
it; what the lab's processes would write (the operator's kubeconfig and log) goes to a scratch
directory of this process's own."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .supervisor import DEFAULT_PROFILE, Cluster


@dataclass
class OtherCluster(Cluster):
    kubeconfig_file: Path = field(default_factory=Path)
    state_dir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="llmfleet-other-cluster-"))
    )
    lws: bool = False
    keda: bool = False

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfig_file

    @property
    def server(self) -> str:
        cfg = yaml.safe_load(self.kubeconfig_file.read_text())
        context = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
        server: str = next(
            c["cluster"]["server"] for c in cfg["clusters"] if c["name"] == context["cluster"]
        )
        return server

    def up(self, profile: Path = DEFAULT_PROFILE, log: Callable[[str], None] = print) -> float:
        raise RuntimeError(f"{self.kubeconfig_file} names a cluster the lab does not start")

    def down(self) -> None:
        """Nothing of the cluster's: only the scratch directory goes."""
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def wipe(self) -> None:
        self.down()

    def running(self) -> dict[str, bool]:
        return {}

    def healthy(self) -> bool:
        try:
            return self.kubectl("get", "--raw", "/readyz").strip() == "ok"
        except subprocess.CalledProcessError:
            return False

    def ensure_up(self) -> bool:
        if not self.healthy():
            raise RuntimeError(f"the cluster of {self.kubeconfig_file} is not ready (/readyz)")
        return False

    def wait_established(self, crds: Iterable[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for crd in crds:
            while True:
                got = json.loads(self.kubectl("get", "crd", crd, "-o", "json"))
                conditions = (got.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {crd} not Established after {timeout:.0f} s")
                time.sleep(0.2)
