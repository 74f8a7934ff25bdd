"""The operator as a user runs it: `helm install` of the chart with the image `make images` built,
its Deployment's pod scheduled onto the node runner's `local-gpu-0`, which runs the container
from that image with crun (noderunner/oci.py): the chart's command, args, env, probes, mounts,
securityContext and ServiceAccount, all as rendered.

The host-process operator (operator_process.Operator) stays for what a pod cannot give a test
cheaply: killing or restarting it at once, two replicas on demand, a previous release's code, and
its metrics on a port of its own (dev/README.md lists which tests use which).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .noderunner.oci import find_image
from .noderunner.runner import GPU_TAINT, NODE_NAME
from .operator_process import CHART, CRDS, OPERATOR_NAMESPACE, RELEASE
from .supervisor import REPO, Cluster, bindir
from .waiting import wait_until

BUILD_IMAGES = REPO / "dev" / "images" / "build.sh"
# A cold build of the operator image took about 2 minutes here; warm, its stamp makes it a no-op.
BUILD_TIMEOUT = 900
# The pod's first start unpacks the image (~15 s) before its probes run (initialDelay 10 s).
READY_TIMEOUT = 180


def operator_image(build: bool = True) -> tuple[str, Path]:
    """The built operator image's reference and archive (`make images`; built here if `build`
    and its stamp is stale)."""
    if build:
        out = subprocess.run(
            [str(BUILD_IMAGES), "operator"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"make images failed:\n{out.stderr[-4000:]}")
    archive = Path(
        subprocess.run(
            [str(BUILD_IMAGES), "--print-path", "operator"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    with_tag = _chart_image()
    if find_image(with_tag, archive.parent) is None:
        raise RuntimeError(f"{archive} does not hold {with_tag}: run make images")
    return with_tag, archive


def _chart_image() -> str:
    """The image `helm install` runs by default: repository:appVersion."""
    import yaml

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    return f"{values['image']['repository']}:{chart['appVersion']}"


@dataclass
class OperatorPod:
    """One release of the chart whose operator runs as a pod on `local-gpu-0`."""

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

    def install(self, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
        """`helm upgrade --install` with the built image; return the operator pod once it is
        Running and Ready by its own probes."""
        image, _ = operator_image()
        repository, _, tag = image.rpartition(":")
        placement = (
            # The image exists on this machine only: never pulled.
            "image.pullPolicy=Never",
            f"image.repository={repository}",
            f"image.tag={tag}",
            "replicas=1",
            f"nodeSelector.kubernetes\\.io/hostname={NODE_NAME}",
        )
        toleration = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}
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
                *(a for v in placement for a in ("--set", v)),
                "--set-json",
                f"tolerations={json.dumps([toleration])}",
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
            self.ready_pod, timeout=timeout, interval=1, what=f"{self.release} operator pod Ready"
        )
        return pod

    def pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component=operator"
        out = self.cluster.kubectl(
            "get", "pods", "-n", self.namespace, "-l", selector, "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def ready_pod(self) -> dict[str, Any] | None:
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
                return pod
        return None

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

    def log(self) -> Path:
        """The node runner's log of the operator pod (its container's output)."""
        pods = [p for p in [self.ready_pod()] if p] or self.pods()
        name = pods[0]["metadata"]["name"] if pods else "none"
        return self.cluster.state_dir / "pods" / f"{self.namespace}_{name}.log"
