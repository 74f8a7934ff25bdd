"""The `zero` scenario (README.md): scale from zero on the GPU as a user meets it, through the
router, KEDA and the operator. Two LLMDeployments of the 8B with `minReplicas: 0`, each on a GPU of
its own, at the same time: `warm` keeps vLLM's compile cache on its model cache claim (the
default with spec.model.cache), `cold` keeps it in the pod (`compileCache: podLocal`, as every
LLMDeployment without a claim), so its pod at zero compiles again.

Each: created, and asked for one completion at once (its first pod, started at creation,
answers it and fills the claim's cache), left to go to zero, then one streamed completion sent to
its router's pod at zero, timed to its first token; beside it, this driver's poll of the engine
pod KEDA's scale-up creates (created, scheduled, container running, Ready, from the request's
send) splits the wait into KEDA's reaction, the pod's start and the router's admission."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes import config as k8s_config
from localcluster import claims
from localcluster.metricsstack.zero import (
    at_zero,
    engine_pods,
    router_ip,
    stream_completion,
)
from localcluster.supervisor import Cluster
from localcluster.waiting import wait_until

from .scenario import LLAMA_8B, POLL_S, condition, copy_log, profile_of

NAME = "zero"
SERVED = "model"
IDLE_SECONDS = 30  # the least the CRD allows: the wait for zero is most of the scenario
WAKE_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Case:
    name: str
    compile_cache: str

    @property
    def namespace(self) -> str:
        return f"gpulab-zero-{self.name}"

    def manifest(self, profile: str) -> dict[str, Any]:
        return {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMDeployment",
            "metadata": {"name": NAME, "namespace": self.namespace},
            "spec": {
                "model": {
                    "name": LLAMA_8B,
                    "servedModelName": SERVED,
                    "cache": {"claimName": "model-cache"},
                },
                "gpus": {"count": 1, "profile": profile},
                "engine": {
                    "maxModelLen": 8192,
                    "extraArgs": ["--load-format=dummy"],
                    "compileCache": self.compile_cache,
                },
                "autoscaling": {
                    "minReplicas": 0,
                    "maxReplicas": 1,
                    "idleSeconds": IDLE_SECONDS,
                    "wakeTimeoutSeconds": WAKE_TIMEOUT_SECONDS,
                },
            },
        }


CASES = (Case("warm", "auto"), Case("cold", "podLocal"))


class PodWatch(threading.Thread):
    """Polls the engine pods from `t0` on and notes, for the first new one, when it was first
    seen, scheduled, its container running and Ready (seconds from t0)."""

    def __init__(self, core: client.CoreV1Api, case: Case, t0: float) -> None:
        super().__init__(daemon=True)
        self.core, self.case, self.t0 = core, case, t0
        self.marks: dict[str, float] = {}
        self.pod = ""
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            now = round(time.monotonic() - self.t0, 2)
            for p in engine_pods(self.core, self.case.namespace, NAME):
                if p.metadata.deletion_timestamp or (self.pod and p.metadata.name != self.pod):
                    continue
                self.pod = p.metadata.name
                self.marks.setdefault("pod_created_s", now)
                conds = {c.type: c.status for c in p.status.conditions or []}
                if conds.get("PodScheduled") == "True":
                    self.marks.setdefault("scheduled_s", now)
                if any(s.state.running for s in p.status.container_statuses or []):
                    self.marks.setdefault("container_running_s", now)
                if conds.get("Ready") == "True":
                    self.marks.setdefault("pod_ready_s", now)
            time.sleep(POLL_S)


def run_case(cluster: Cluster, case: Case, results: Path) -> dict[str, Any]:
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    ns = case.namespace
    cluster.kubectl("create", "namespace", ns)
    claims.claim(api, cluster, ns, "model-cache")
    record: dict[str, Any] = {
        "scenario": f"zero-{case.name}",
        "profile": profile_of(cluster),
    }
    record["compile_cache"] = case.compile_cache
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(case.manifest(record["profile"])))

    # A request at once: KEDA would otherwise take the first pod away after one idle window
    # (initialCooldownPeriod), before it finished compiling, and leave the claim's cache empty.
    rip = wait_until(lambda: router_ip(core, ns, NAME), 120, 1, f"{ns}: the router Ready")
    answer = stream_completion(
        f"http://{rip}:8000/v1", timeout=WAKE_TIMEOUT_SECONDS + 30, model=SERVED
    )
    record["first_pod_first_token_s"] = round(time.monotonic() - t0, 1)
    record["first_pod_http_status"] = answer.status

    def verified() -> dict[str, Any] | None:
        obj = json.loads(cluster.kubectl("get", "llmd", NAME, "-n", ns, "-o", "json"))
        c = condition(obj, "PlanVerified")
        return obj if c.get("status") == "True" else None

    obj = wait_until(verified, 60, 1, f"{ns}: PlanVerified=True of the first pod")
    record["first_pod_plan_verified_s"] = round(time.monotonic() - t0, 1)
    record["status"] = obj.get("status", {})
    first = [p.metadata.name for p in engine_pods(core, ns, NAME)]
    t1 = time.monotonic()
    wait_until(lambda: at_zero(api, ns, NAME), IDLE_SECONDS + 300, 1, f"{ns}: at zero")
    record["to_zero_s"] = round(time.monotonic() - t1, 1)
    rip = wait_until(lambda: router_ip(core, ns, NAME), 60, 1, f"{ns}: the router Ready")
    sent = time.monotonic()
    watch = PodWatch(core, case, sent)
    watch.start()
    try:
        answer = stream_completion(
            f"http://{rip}:8000/v1", timeout=WAKE_TIMEOUT_SECONDS + 30, model=SERVED
        )
    finally:
        watch.done.set()
        watch.join()
    record |= {
        "http_status": answer.status,
        "tokens": answer.tokens,
        "first_token_s": round(answer.first_token_s, 2),
        "at_zero": watch.marks,
        "pod": watch.pod,
    }
    for n, pod in enumerate([*first, watch.pod]):
        if pod:
            copy_log(cluster, ns, pod, results / f"zero-{case.name}-{n}.log")
    return record


def run_zero(cluster: Cluster, results: Path) -> list[dict[str, Any]]:
    """Both cases at once (one GPU each); a case that fails leaves its error in its record."""
    out: dict[str, dict[str, Any]] = {}

    def one(case: Case) -> None:
        try:
            out[case.name] = run_case(cluster, case, results)
        except Exception as e:  # the other case's figure still counts
            out[case.name] = {"scenario": f"zero-{case.name}", "error": repr(e)}

    threads = [threading.Thread(target=one, args=(c,)) for c in CASES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [out[c.name] for c in CASES]
