"""The demo's steps, in the order a newcomer sees them (see the package's docstring)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from llmfleet.models.deployment import KIND

from .. import idleengines
from ..metricsstack import MetricsStack
from ..operator_pod import OperatorPod
from ..operator_process import OPERATOR_NAMESPACE, RELEASE, condition
from ..supervisor import REPO, Cluster, bindir
from . import prerequisites, report
from .serving import DemoError, chat, reach, run, wait_routing

EXAMPLES = REPO / "examples"
DEMO_NAMESPACE = "llmfleet-demo"
# Largest pods first, each placed before the next is applied: the scheduler spreads pods by CPU
# and memory, not by GPUs, so 1- and 2-GPU pods applied first could leave each node a few GPUs
# short of a 4-GPU pod. In this order the 16 GPUs of the two H100 nodes fit all three exactly:
# 70B 2 pods x 4 GPUs, Qwen FP8 2 x 2, 8B 4 x 1.
GPU_EXAMPLES = ("llama-3.1-70b-8xh100.yaml", "qwen2.5-72b-fp8.yaml", "llama-3.1-8b-multipod.yaml")
LOCAL_EXAMPLE = "tiny-local-cluster.yaml"
LOCAL_NAME = "tiny-local"
# A vLLM engine on 2 busy cores starts in 40-90 s; the first start also makes the tiny model.
AVAILABLE_TIMEOUT = 600.0
ROUTING_TIMEOUT = 120.0
# A kwok pod is Running within a second of being scheduled; the HPA lifts a new Deployment from
# one pod to minReplicas on its next sync (5 s).
PLACED_TIMEOUT = 90.0

Out = Callable[[str], None]


def run_demo(cluster: Cluster, out: Out = print) -> str:
    """The demo on a running cluster; returns the chat answer's text."""
    kubectl = cluster.kubectl

    _step(out, "Nodes: two fake 8x H100 nodes, one CPU node (kwok)")
    out(kubectl("get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count"))

    _step(out, "Plans, offline (llmfleet plan), for every example")
    for f in sorted(EXAMPLES.glob("*.yaml")):
        if _deployment(f) is not None:
            out(f"--- {f.relative_to(REPO)}")
            out(run(str(Path(sys.executable).parent / "llmfleet"), "plan", "-f", str(f)))

    _step(out, "helm upgrade --install llmfleet charts/llmfleet")
    # The chart's operator pod, from the image `make images` built, on the lab's system node
    # (crun runs it: operator_pod.py). A release installed before (the e2e session's) keeps its
    # values: the demo does not roll it.
    cluster.start_node_runner()
    release = OperatorPod(cluster)
    pod = release.install(reuse_values=True)
    out(
        f"operator pod {pod['metadata']['name']} Ready on {pod['spec']['nodeName']}; "
        f"log: {release.log()}"
    )
    helm = [str(bindir("helm") / "helm"), f"--kubeconfig={cluster.kubeconfig}"]
    out(run(*helm, "status", RELEASE, "--namespace", OPERATOR_NAMESPACE))

    _step(out, "The metrics path the HPAs read: Prometheus, prometheus-adapter, kube-state-metrics")
    stack = MetricsStack(cluster).start()
    idleengines.start(cluster, [DEMO_NAMESPACE])
    out(
        f"Prometheus {stack.prometheus_url} scrapes the engine pods; prometheus-adapter serves "
        "their vllm:num_requests_waiting to the HPAs as custom.metrics.k8s.io "
        "vllm_num_requests_waiting.\nkwok's pods run nothing, so a stand-in answers their "
        "/metrics as idle engines do (queue 0; dev/localcluster/idleengines.py)."
    )

    _step(out, "What the GPU examples expect the cluster to have: Secrets and a claim")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEMO_NAMESPACE}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    specs = [_deployment(EXAMPLES / name) or {} for name in GPU_EXAMPLES]
    needs = prerequisites.needs([s.get("spec") or {} for s in specs])
    prerequisites.ensure(cluster, DEMO_NAMESPACE, needs)
    out(
        "Secrets with placeholder values (nothing is downloaded on fake nodes) and the claim "
        "bound to a PersistentVolume made for it (this cluster has no storage provisioner; on "
        "yours, a ReadWriteMany volume):"
    )
    out(kubectl("get", "secret,pvc", "-n", DEMO_NAMESPACE).rstrip())

    _step(out, "kubectl apply -f examples/ (GPU examples land on the fake H100 nodes)")
    out("Largest pods first: the scheduler spreads pods by CPU and memory, not GPUs.")
    for name, spec in zip(GPU_EXAMPLES, specs, strict=True):
        out(kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / name)).strip())
        if name != GPU_EXAMPLES[-1]:  # (the last one's pods take what is left)
            _wait_placed(cluster, spec["metadata"]["name"], PLACED_TIMEOUT)
    out(kubectl("get", "llmd", "-n", DEMO_NAMESPACE))
    out(kubectl("get", "deploy,hpa,pods", "-n", DEMO_NAMESPACE, "-o", "wide"))

    _step(out, "A real vLLM: the tiny model on the local emulated-GPU node")
    cluster.start_node_runner()
    out(kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / LOCAL_EXAMPLE)).strip())
    llmd = _wait_available(cluster, LOCAL_NAME, AVAILABLE_TIMEOUT)
    endpoint: str = llmd["status"]["endpoint"]
    base, component = reach(cluster, endpoint)
    if component == "router":
        wait_routing(base, ROUTING_TIMEOUT)
    answer = chat(base)
    out(
        f"POST {endpoint}/chat/completions, reached at {base} (the Service's Ready pod: Service "
        "IPs do not route on this cluster). A random tiny model: the words are noise, the "
        "serving path is real."
    )
    out(f"model: {answer['model']}\nanswer: {answer['text']!r}\nusage: {answer['usage']}")

    _step(out, "Where each LLMDeployment stands (kubectl get llmd; describe for the conditions)")
    llmds, off = report.wait_settled(cluster, DEMO_NAMESPACE)
    out(kubectl("get", "llmd", "-n", DEMO_NAMESPACE).rstrip())
    report.show(cluster, llmds, out)
    if off:
        raise DemoError("; ".join(off))

    _step(out, "Explore")
    out(
        f"export KUBECONFIG={cluster.kubeconfig}\n"
        f"kubectl get llmd -n {DEMO_NAMESPACE}\n"
        f"kubectl describe llmd llama-3-1-70b -n {DEMO_NAMESPACE}\n"
        f"kubectl get --raw '/apis/custom.metrics.k8s.io/v1beta1/namespaces/{DEMO_NAMESPACE}"
        "/pods/*/vllm_num_requests_waiting'   # what the HPAs read\n"
        f"Prometheus: {stack.prometheus_url}\n"
        "make cluster-down   # stops the cluster, the operator and the vLLM processes"
    )
    return str(answer["text"])


def tear_down(cluster: Cluster, timeout: float = 180) -> None:
    """Remove what the demo made: its namespace (everything in it), the claim's volume, the
    idle-engine stand-in. The metrics stack stays (`Cluster.down()` stops it)."""
    idleengines.stop(cluster)
    cluster.kubectl("delete", "namespace", DEMO_NAMESPACE, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + timeout
    while cluster.kubectl(
        "get", "namespace", "--field-selector", f"metadata.name={DEMO_NAMESPACE}", "-o", "name"
    ).strip():
        if time.monotonic() > deadline:
            raise DemoError(f"the namespace {DEMO_NAMESPACE} still there after {timeout:.0f}s")
        time.sleep(2)
    prerequisites.tear_down(cluster)


def main() -> int:
    try:
        run_demo(Cluster(), out=lambda text: print(text, flush=True))
    except DemoError as e:
        print(f"\nmake demo: {e}", file=sys.stderr)
        return 1
    return 0


def _step(out: Out, title: str) -> None:
    out(f"\n\033[1m== {title}\033[0m")


def _deployment(path: Path) -> dict[str, Any] | None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return next((d for d in docs if d.get("kind") == KIND), None)


def _get(cluster: Cluster, *what: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", *what, "-n", DEMO_NAMESPACE, "-o", "json")
    )
    return obj


def _wait_placed(cluster: Cluster, name: str, timeout: float) -> None:
    """Until the LLMDeployment's engines are all up (Progressing=False: as many ready pods as
    the HPA's minReplicas), so that the next example's pods see what these took. After
    `timeout` it goes on: the last step shows what this one waits for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        llmd = _get(cluster, "llmd", name)
        progressing = condition(llmd, "Progressing")
        current = progressing.get("observedGeneration", 0) >= llmd["metadata"]["generation"]
        if current and progressing.get("status") == "False":
            return
        time.sleep(1)


def _wait_available(cluster: Cluster, name: str, timeout: float) -> dict[str, Any]:
    """The LLMDeployment once its Available condition is True (for its current generation)."""
    deadline = time.monotonic() + timeout
    while True:
        llmd = _get(cluster, "llmd", name)
        available = condition(llmd, "Available")
        current = available.get("observedGeneration", 0) >= llmd["metadata"]["generation"]
        if available.get("status") == "True" and current and llmd["status"].get("endpoint"):
            return llmd
        if time.monotonic() > deadline:
            raise DemoError(_not_available(cluster, llmd, timeout))
        time.sleep(2)


def _not_available(cluster: Cluster, llmd: dict[str, Any], timeout: float) -> str:
    name = llmd["metadata"]["name"]
    conditions = "; ".join(
        f"{c['type']}={c['status']} ({c.get('reason', '')}: {c.get('message', '')})"
        for c in (llmd.get("status") or {}).get("conditions") or []
    )
    pods = _get(cluster, "pods", "-l", f"llmfleet.dev/deployment={name}")["items"]
    phases = ", ".join(f"{p['metadata']['name']} {p['status'].get('phase')}" for p in pods)
    return (
        f"LLMDeployment {DEMO_NAMESPACE}/{name} not Available after {timeout:.0f}s. "
        f"Conditions: {conditions or 'none yet'}. Pods: {phases or 'none'}. "
        f"Operator log: {cluster.state_dir / 'pods'}/{OPERATOR_NAMESPACE}_*.log (its pod) or "
        f"{cluster.state_dir / 'operator.log'} (a process); node runner log: "
        f"{cluster.state_dir / 'node-runner.log'}."
    )
