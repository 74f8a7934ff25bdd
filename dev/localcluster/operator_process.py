"""The operator on the local cluster: the real `llmfleet run` process, authenticated as the
chart's ServiceAccount (a token from the TokenRequest API), so whatever runs it (`make demo`, the
e2e tests, the benchmarks) also proves the chart's RBAC is enough. Plus helpers to count its API
writes from the API server's audit log."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from . import operator_signals as signals
from .metricsstack.load import GROUP, PLURAL, VERSION
from .ports import free_port
from .supervisor import REPO, Cluster, bindir
from .waiting import wait_until

CHART = REPO / "charts" / "llmfleet"
OPERATOR_NAMESPACE = "llmfleet-system"
RELEASE = "llmfleet"
CRDS = ("llmdeployments.llmfleet.dev", "llmbatchjobs.llmfleet.dev")
# Flags of the chart's operator container that the process takes as the chart renders them (the
# others it sets itself: loopback endpoints, the log level, the resync period, the profiles' file).
CHART_FLAGS = (
    "--default-engine-image=",
    "--adapter-fetcher-image=",
    "--engine-network-policy=",
    "--keda-prometheus-url=",
    "--hf-endpoint=",
    "--spare-priority-class=",
    "--engine-priority-class=",
    "--leader-election-namespace=",
    "--leader-election-id=",
    "--lease-duration=",
    "--renew-deadline=",
    "--retry-period=",
    "--fetcher-key-secret=",
)
# The audit log's user.extra key that names the token a request came with (its JTI): replicas of
# one ServiceAccount are told apart by it.
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


def helm_template(*args: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            str(bindir("helm") / "helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            *args,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@dataclass
class Operator:
    cluster: Cluster
    resync_seconds: float = 5.0
    proc: subprocess.Popen[bytes] | None = None
    metrics_port: int = field(default_factory=free_port)
    # GPU profiles added to the chart's gpuProfiles value at install (name -> profile).
    gpu_profiles_extra: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Chart values set at install (`--set` arguments), e.g. engine.networkPolicy.enabled=true.
    chart_values: tuple[str, ...] = ()
    chart_args: list[str] = field(default_factory=list)
    username: str = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}"
    # The process's name (pid and log files): replicas of one installation differ by it.
    name: str = "operator"
    health_port: int = field(default_factory=free_port)
    # The JTI of this replica's token, as the audit log names it.
    credential_id: str = ""
    # Another release's chart and operator code (an upgrade test's previous release).
    chart: Path = CHART
    source: Path | None = None
    # Times the process exited by itself and was started again.
    restarts: int = 0
    # Whether install_identity waits for the chart's objects to be ready (helm --wait): not on
    # a cluster without a controller manager, whose Deployments never report.
    helm_wait: bool = True
    _intended: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.state_dir / f"{self.name}-sa.kubeconfig"

    @property
    def log_path(self) -> Path:
        return self.cluster.state_dir / f"{self.name}.log"

    def replica(self, name: str) -> Operator:
        """Another replica of this installation (the same chart flags, a token of its own)."""
        other = Operator(
            self.cluster,
            resync_seconds=self.resync_seconds,
            chart_values=self.chart_values,
            chart_args=list(self.chart_args),
            name=name,
        )
        other.gpu_profiles.write_text(self.gpu_profiles.read_text())
        other.issue_token()
        return other

    @property
    def gpu_profiles(self) -> Path:
        return self.cluster.state_dir / f"{self.name}-gpu-profiles.yaml"

    def install_identity(self) -> None:
        """The chart, installed with Helm as users do (all but the operator pod: kwok nodes run no
        containers), and a kubeconfig holding its ServiceAccount's token."""
        k = self.cluster.kubectl
        # The chart installs and upgrades the CRDs (crds.enabled). --take-ownership: a cluster
        # may hold them from elsewhere (a test's release, an older checkout's kubectl apply).
        subprocess.run(
            [
                str(bindir("helm") / "helm"),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "upgrade",
                "--install",
                RELEASE,
                str(self.chart),
                "--namespace",
                OPERATOR_NAMESPACE,
                "--create-namespace",
                "--take-ownership",
                "--set",
                "replicas=0",
                *(
                    arg
                    for name, profile in sorted(self.gpu_profiles_extra.items())
                    for arg in ("--set-json", f"gpuProfiles.{name}={json.dumps(profile)}")
                ),
                *(arg for value in self.chart_values for arg in ("--set", value)),
                *(["--wait"] if self.helm_wait else []),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        # Established before the operator watches them or a test creates an object of their kinds.
        self.cluster.wait_established(CRDS)
        # What the chart's operator pod would mount at --gpu-profiles.
        self.gpu_profiles.write_text(
            k(
                "get",
                "configmap",
                f"{RELEASE}-gpu-profiles",
                "-n",
                OPERATOR_NAMESPACE,
                "-o",
                "jsonpath={.data.gpu-profiles\\.yaml}",
            )
        )
        args = json.loads(
            k(
                "get",
                "deployment",
                RELEASE,
                "-n",
                OPERATOR_NAMESPACE,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].args}",
            )
        )
        self.chart_args = [a for a in args if a.startswith(CHART_FLAGS)]
        self.issue_token()

    def issue_token(self) -> None:
        """A kubeconfig holding a new token of the chart's ServiceAccount."""
        k = self.cluster.kubectl
        token = k("create", "token", RELEASE, "-n", OPERATOR_NAMESPACE, "--duration=24h").strip()
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        self.credential_id = f"JTI={claims['jti']}"
        cfg = yaml.safe_load(self.cluster.kubeconfig.read_text())
        cfg["users"] = [{"name": "operator", "user": {"token": token}}]
        # The current context's cluster (a kubeconfig given with --kubeconfig may have several).
        (context,) = [c for c in cfg["contexts"] if c["name"] == cfg["current-context"]]
        context["context"]["user"] = "operator"
        cfg["contexts"] = [context]
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    def start(self, wait_leading: bool = True) -> None:
        """Start the process; with `wait_leading`, return once it leads (holds the Lease). Until
        `stop` or `kill`, a process that exits by itself is started again, as a kubelet restarts
        a container (an operator that lost its Lease exits on purpose)."""
        self._intended.set()
        self.cluster.stop(self.name)
        self._spawn()
        self._intended = threading.Event()
        threading.Thread(target=self._restart_on_exit, args=(self._intended,), daemon=True).start()
        wait_until(self._serving_metrics, timeout=30, what="operator metrics endpoint")
        if wait_leading:
            # A Lease left by a killed replica expires first (--lease-duration).
            wait_until(self.leading, timeout=60, what=f"{self.name} holding the leader Lease")

    def _restart_on_exit(self, intended: threading.Event) -> None:
        backoff = 0.0
        while not intended.wait(0.5):
            proc = self.proc
            if proc is None or proc.poll() is None:
                continue
            with open(self.log_path, "a") as log:
                log.write(
                    f"[lab] {self.name} exited with code {proc.returncode}; restarting in "
                    f"{backoff:.0f} s, as a kubelet would\n"
                )
            if intended.wait(backoff):
                return
            with self._lock:  # never after a stop or kill began
                if intended.is_set():
                    return
                self.restarts += 1
                self._spawn()
            backoff = min(max(10.0, 2 * backoff), 300.0)  # the kubelet's crash-loop back-off

    def _spawn(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        program = [str(Path(sys.executable).parent / "llmfleet")]
        if self.source is not None:
            # Ahead of what the caller's environment holds (dev/gpulab's packages for the operator).
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, (str(self.source), env.get("PYTHONPATH")))
            )
            program = [sys.executable, "-m", "llmfleet.cli"]
        logf = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(
            [*program, *self._command()],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        logf.close()
        (self.cluster.state_dir / f"{self.name}.pid").write_text(str(self.proc.pid))

    def _command(self) -> list[str]:
        """`llmfleet run` and its flags: the process's identity, endpoints and the chart's."""
        return [
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(self.metrics_port),
            "--liveness",
            f"http://127.0.0.1:{self.health_port}/healthz",
            "--resync-seconds",
            str(self.resync_seconds),
            "--log-level",
            "INFO",
            "--gpu-profiles",
            str(self.gpu_profiles),
            *self.chart_args,
        ]

    def leading(self) -> bool:
        return self.metric("llmfleet_operator_leader") == 1

    def health(self) -> tuple[int, str]:
        """What /healthz answers: the status code and the text."""
        return signals.health(f"http://127.0.0.1:{self.health_port}/healthz")

    def health_ok(self) -> bool:
        try:
            return self.health()[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        """Stop as Kubernetes stops a pod (SIGTERM): the leader hands its Lease over."""
        with self._lock:
            self._intended.set()
        if self.proc and self.proc.poll() is None:
            self.cluster.stop(self.name, grace=30)
            self.proc.wait(timeout=5)
        self.proc = None

    @contextlib.contextmanager
    def configured(self, *chart_values: str) -> Iterator[None]:
        """Inside the block the chart is installed with these values and the operator runs with
        what they render; after it, with the values it had before (both restart the operator,
        which then reconciles every resource again, as after an upgrade)."""
        before = self.chart_values
        self.stop()
        self.chart_values = before + chart_values
        try:
            self.install_identity()
            self.start()
            yield
        finally:
            self.stop()
            self.chart_values = before
            self.install_identity()
            self.start()

    def _serving_metrics(self) -> bool:
        try:
            self.metrics()
        except OSError:
            return False
        return True

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the process for good (no restart)."""
        with self._lock:
            self._intended.set()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        self.proc = None

    @property
    def metrics_target(self) -> str:
        """host:port of its metrics endpoint (what Prometheus scrapes)."""
        return f"127.0.0.1:{self.metrics_port}"

    def metrics(self) -> str:
        return signals.fetch_metrics(f"http://127.0.0.1:{self.metrics_port}/metrics")

    def metric(self, name: str, **labels: str) -> float:
        return signals.metric_sum(self.metrics(), name, **labels)

    def writes_since(
        self, since: datetime, namespace: str | None = None, *, leases: bool = False
    ) -> list[dict[str, Any]]:
        """Write requests the operator's replicas made since `since` (from the audit log),
        without the leader's Lease renewals unless `leases`."""
        return signals.audit_writes(
            self.cluster.state_dir, self.username, since, namespace, leases=leases
        )


def credential(event: dict[str, Any]) -> str:
    """Which token an audit event's request came with (`Operator.credential_id`)."""
    extra = event["user"].get("extra") or {}
    return ",".join(extra.get(CREDENTIAL_ID) or [])


def utcnow() -> datetime:
    return datetime.now(UTC)


def get_llmd(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """An LLMDeployment as the API server has it."""
    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return obj


def condition(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    """The status condition of type `ctype` ({} when there is none)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}
