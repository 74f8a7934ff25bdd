"""What dev/gpulab runs on the GPU machine: an LLMDeployment as a user writes it (dummy weights,
no router: one engine pod), timed from the moment its engine pod is created to the first token it
answers, then to PlanVerified; then, as often as asked, its engine pod deleted and the replacement
timed the same way (a new pod of the same Deployment: with a model cache, it finds the compile
cache the first one left there).

Times are this driver's own observations, polled every POLL_S: Kubernetes' timestamps have whole
seconds. Each pod's vLLM log is copied to the results, where bench/gpu_start.py times vLLM's own
phases (imports, weight load, torch.compile, CUDA graphs, KV profiling)."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config
from localcluster import claims
from localcluster.supervisor import Cluster

POLL_S = 0.25
NAME = "engine"
SERVED = "model"


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    gpus: int = 1
    quantization: str | None = None
    max_model_len: int = 8192
    model_cache: bool = False  # a claim at spec.model.cache (the compile cache lives beside it)
    restarts: int = 1
    extra_args: tuple[str, ...] = ("--load-format=dummy",)
    timeout_s: float = 300  # per pod start
    # SinglePod makes gpus one tensor-parallel pod; the default (Auto, Throughput) chose two TP1
    # pods for 8B on two H200s (bench/gpu/h200x2-2026-11-28-gpulab-two-8b.jsonl).
    strategy: str = "Auto"

    @staticmethod
    def named(name: str) -> Scenario:
        return SCENARIOS[name]

    @property
    def namespace(self) -> str:
        return f"gpulab-{self.name}"

    def manifest(self, profile: str) -> dict[str, Any]:
        model: dict[str, Any] = {"name": self.model, "servedModelName": SERVED}
        if self.quantization:
            model["quantization"] = self.quantization
        if self.model_cache:
            model["cache"] = {"claimName": "model-cache"}
        return {
            "apiVersion": "llmfleet.dev/v1alpha1",
            "kind": "LLMDeployment",
            "metadata": {"name": NAME, "namespace": self.namespace},
            "spec": {
                "model": model,
                "gpus": {"count": self.gpus, "profile": profile},
                "strategy": self.strategy,
                "engine": {"maxModelLen": self.max_model_len, "extraArgs": list(self.extra_args)},
                "router": {"enabled": False},
            },
        }


LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("8b", LLAMA_8B),
        Scenario("8b-cache", LLAMA_8B, model_cache=True),
        Scenario("8b-tp2", LLAMA_8B, gpus=2, model_cache=True, strategy="SinglePod"),
        Scenario("two-8b", LLAMA_8B, gpus=2, model_cache=True, restarts=0),
        # Real bytes: the model table must map the 8B to a checkpoint load_probe.py wrote
        # (GPULAB_MODEL in remote-run.sh), as the model cache would hold it.
        Scenario("8b-real", LLAMA_8B, model_cache=True, extra_args=()),
        Scenario("70b-fp8", LLAMA_70B, quantization="fp8", model_cache=True, max_model_len=4096),
        # The procedure itself, on a machine without GPUs (README.md, "Try it here first").
        Scenario("smoke", LLAMA_8B, max_model_len=1024, restarts=0, timeout_s=300),
    )
}


def profile_of(cluster: Cluster) -> str:
    """The chart's GPU profile whose product label is the node runner's GPU."""
    node = json.loads(cluster.kubectl("get", "node", "local-gpu-0", "-o", "json"))
    product = node["metadata"]["labels"]["nvidia.com/gpu.product"]
    return {"NVIDIA-H200": "h200-141gb", "NVIDIA-H100-80GB-HBM3": "h100-80gb"}[product]


def run_scenario(cluster: Cluster, s: Scenario, results: Path) -> dict[str, Any]:
    ns = s.namespace
    cluster.kubectl("create", "namespace", ns)
    if s.model_cache:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        claims.claim(api, cluster, ns, "model-cache")
    record: dict[str, Any] = {"scenario": s.name, "profile": profile_of(cluster), "starts": []}
    manifest = s.manifest(record["profile"])
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    seen: set[str] = set()
    for attempt in range(s.restarts + 1):
        start = time.monotonic()
        pod = _await_new_pod(cluster, ns, seen, start, s.timeout_s)
        timing = _time_start(cluster, ns, pod, start, s.timeout_s, verify=attempt == 0)
        timing["start"] = "first" if attempt == 0 else f"replacement {attempt}"
        record["starts"].append(timing)
        copy_log(cluster, ns, pod, results / f"{s.name}-{attempt}.log")
        if attempt == 0:
            record["status"] = _llmd(cluster, ns).get("status", {})
        if attempt < s.restarts:
            cluster.kubectl("delete", "pod", pod, "-n", ns, "--wait=false")
    cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=180s")
    return record


def _llmd(cluster: Cluster, ns: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(cluster.kubectl("get", "llmd", NAME, "-n", ns, "-o", "json"))
    return out


def _pods(cluster: Cluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        cluster.kubectl("get", "pods", "-n", ns, "-o", "json")
    )["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _await_new_pod(cluster: Cluster, ns: str, seen: set[str], start: float, limit: float) -> str:
    while time.monotonic() - start < limit:
        for p in _pods(cluster, ns):
            name = p["metadata"]["name"]
            if name not in seen:
                seen.add(name)
                return str(name)
        time.sleep(POLL_S)
    raise TimeoutError(f"{ns}: no new engine pod after {limit} s")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def _answers(ip: str, port: int) -> bool:
    body = json.dumps({"model": SERVED, "prompt": "Hello", "max_tokens": 1}).encode()
    req = urllib.request.Request(
        f"http://{ip}:{port}/v1/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _time_start(
    cluster: Cluster, ns: str, pod: str, start: float, limit: float, verify: bool
) -> dict[str, Any]:
    """Seconds from `start` (the pod's creation, or the delete that led to it) to each step;
    with `verify`, to PlanVerified=True too (a replacement finds it set by its predecessor)."""
    marks: dict[str, float] = {}
    wanted = {"first_token_s", "pod_ready_s", *(["plan_verified_s"] if verify else [])}
    verified: dict[str, Any] = {}
    while time.monotonic() - start < limit:
        now = round(time.monotonic() - start, 2)
        obj = json.loads(cluster.kubectl("get", "pod", pod, "-n", ns, "-o", "json"))
        status = obj.get("status", {})
        if condition(obj, "PodScheduled").get("status") == "True":
            marks.setdefault("scheduled_s", now)
        running = [c for c in status.get("containerStatuses") or [] if "running" in c["state"]]
        if running:
            marks.setdefault("container_running_s", now)
        if condition(obj, "Ready").get("status") == "True":
            marks.setdefault("pod_ready_s", now)
        ip = status.get("podIP")
        if running and "first_token_s" not in marks and ip and _answers(ip, 8000):
            marks["first_token_s"] = round(time.monotonic() - start, 2)
        if verify:
            verified = condition(_llmd(cluster, ns), "PlanVerified")
            if verified.get("status") == "True":
                marks.setdefault("plan_verified_s", now)
        if wanted <= marks.keys():
            return {"pod": pod, **marks, "plan_verified": verified}
        time.sleep(POLL_S)
    raise TimeoutError(f"{ns}/{pod}: {marks} after {limit} s")


def copy_log(cluster: Cluster, ns: str, pod: str, dest: Path) -> None:
    src = cluster.state_dir / "pods" / f"{ns}_{pod}.log"
    if src.exists():
        shutil.copyfile(src, dest)
