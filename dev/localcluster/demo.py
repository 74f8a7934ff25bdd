"""`make demo`: the local cluster with fake GPU nodes, the chart, the examples and their plans, and
a real vLLM answering a chat request at the endpoint the LLMDeployment's status names.
Everything stays up afterwards; `make cluster-down` stops it all.

`run()` is the demo; `main()` runs it on the cluster `make cluster-up` started and turns a step
that does not come true into one message on stderr and exit status 1. The e2e test
`tests/e2e/test_demo.py` calls the same `run()`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from llmfleet.models.deployment import KIND

from .operator_pod import OperatorPod
from .operator_process import OPERATOR_NAMESPACE, RELEASE, Operator, condition
from .routerapi import routed_engines
from .supervisor import REPO, Cluster, bindir

EXAMPLES = REPO / "examples"
DEMO_NAMESPACE = "llmfleet-demo"
GPU_EXAMPLES = ("llama-3.1-70b-8xh100.yaml", "llama-3.1-8b-multipod.yaml", "qwen2.5-72b-fp8.yaml")
LOCAL_EXAMPLE = "tiny-local-cluster.yaml"
LOCAL_NAME = "tiny-local"
INSTALL_VLLM = REPO / "dev" / "dataplane" / "install-vllm.sh"
# A vLLM engine on 2 busy cores starts in 40-90 s; the first start also makes the tiny model.
AVAILABLE_TIMEOUT = 600.0
ROUTING_TIMEOUT = 120.0
COMPONENT_LABEL = "app.kubernetes.io/component"


class DemoError(Exception):
    """A step of the demo that did not come true; the message says what is not ready."""


Out = Callable[[str], None]


def run(cluster: Cluster, out: Out = print) -> str:
    """The demo on a running cluster; returns the chat answer's text."""
    kubectl = cluster.kubectl
    helm = [str(bindir("helm") / "helm"), f"--kubeconfig={cluster.kubeconfig}"]

    _step(out, "Nodes: two fake 8x H100 nodes, one CPU node (kwok)")
    out(kubectl("get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count"))

    _step(out, "Plans, offline (llmfleet plan), for every example")
    for f in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        if any(d.get("kind") == KIND for d in docs):
            out(f"--- {f.relative_to(REPO)}")
            out(_run(str(Path(sys.executable).parent / "llmfleet"), "plan", "-f", str(f)))

    _step(out, "helm upgrade --install llmfleet charts/llmfleet")
    # The chart's operator pod, from the image `make images` built, on the node runner's node
    # (crun runs it: operator_pod.py). An operator the e2e tests run as a process stays.
    cluster.start_node_runner()
    if cluster.alive("operator"):
        out(f"operator running as a process of the tests; log: {Operator(cluster).log_path}")
    else:
        release = OperatorPod(cluster)
        pod = release.install()
        out(f"operator pod {pod['metadata']['name']} Ready on local-gpu-0; log: {release.log()}")
    out(_run(*helm, "status", RELEASE, "--namespace", OPERATOR_NAMESPACE))

    _step(out, "kubectl apply -f examples/ (GPU examples land on the fake H100 nodes)")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEMO_NAMESPACE}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(namespace))
    for name in GPU_EXAMPLES:
        out(kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / name)).strip())
    time.sleep(5)
    out(kubectl("get", "llmd", "-n", DEMO_NAMESPACE))
    out(kubectl("get", "deploy,hpa,pdb,pods", "-n", DEMO_NAMESPACE, "-o", "wide"))

    _step(out, "A real vLLM: the tiny model on the local emulated-GPU node")
    cluster.start_node_runner()
    out(kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / LOCAL_EXAMPLE)).strip())
    llmd = _wait_available(cluster, LOCAL_NAME, AVAILABLE_TIMEOUT)
    out(kubectl("get", "llmd", LOCAL_NAME, "-n", DEMO_NAMESPACE))
    endpoint: str = llmd["status"]["endpoint"]
    base, component = _reach(cluster, endpoint)
    if component == "router":
        _wait_routing(base, ROUTING_TIMEOUT)
    answer = _chat(base)
    out(
        f"POST {endpoint}/chat/completions, reached at {base} (the Service's Ready pod: Service "
        "IPs do not route on this cluster). A random tiny model: the words are noise, the "
        "serving path is real."
    )
    out(f"model: {answer['model']}\nanswer: {answer['text']!r}\nusage: {answer['usage']}")

    _step(out, "Explore")
    out(
        f"export KUBECONFIG={cluster.kubeconfig}\n"
        f"kubectl get llmd -n {DEMO_NAMESPACE}\n"
        f"kubectl describe llmd llama-3-1-70b -n {DEMO_NAMESPACE}\n"
        "make cluster-down   # stops the cluster, the operator and the vLLM processes"
    )
    return str(answer["text"])


def _step(out: Out, title: str) -> None:
    out(f"\n\033[1m== {title}\033[0m")


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def _get(cluster: Cluster, *what: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(
        cluster.kubectl("get", *what, "-n", DEMO_NAMESPACE, "-o", "json")
    )
    return obj


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


def _reach(cluster: Cluster, endpoint: str) -> tuple[str, str]:
    """`endpoint` (http://<service>.<namespace>.svc:<port>/v1) as a URL this machine can dial:
    a Ready pod of the Service's selector at the container port its targetPort names, what
    kube-proxy would pick (EndpointSlices refuse the loopback pod IPs of this cluster); and the
    pod's component (router or engine)."""
    url = urlsplit(endpoint)
    service_name, namespace = (url.hostname or "").split(".")[:2]
    service = json.loads(
        cluster.kubectl("get", "service", service_name, "-n", namespace, "-o", "json")
    )
    port = next(p for p in service["spec"]["ports"] if p["port"] == (url.port or 80))
    selector = ",".join(f"{k}={v}" for k, v in sorted(service["spec"]["selector"].items()))
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    )["items"]
    for pod in pods:
        ready = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
        if ready.get("Ready") != "True" or pod["metadata"].get("deletionTimestamp"):
            continue
        target = port["targetPort"]
        if isinstance(target, str):
            target = next(
                cp["containerPort"]
                for c in pod["spec"]["containers"]
                for cp in c.get("ports") or []
                if cp.get("name") == target
            )
        component = pod["metadata"]["labels"].get(COMPONENT_LABEL, "")
        return f"http://{pod['status']['podIP']}:{target}{url.path}", component
    raise DemoError(
        f"the Service {namespace}/{service_name} behind {endpoint} has no Ready pod "
        f"(selector {selector})"
    )


def _wait_routing(base: str, timeout: float) -> None:
    """The vLLM Router discovers engines through the Kubernetes API, a few seconds after they
    are Ready: wait until it routes to one."""
    host = urlsplit(base).hostname or ""
    deadline = time.monotonic() + timeout
    while not routed_engines(host):
        if time.monotonic() > deadline:
            raise DemoError(f"the vLLM Router at {host} routes to no engine after {timeout:.0f}s")
        time.sleep(2)


def _chat(base: str) -> dict[str, Any]:
    """One chat request with the OpenAI client, as a user's program would send it."""
    python = Path(_run(str(INSTALL_VLLM), "--print-path").strip().splitlines()[-1]) / "bin/python"
    code = (
        "import json, openai\n"
        f"c = openai.OpenAI(base_url={base!r}, api_key='none')\n"
        "r = c.chat.completions.create(model='tiny', max_tokens=24, "
        "messages=[{'role': 'user', 'content': 'Hello, fleet!'}])\n"
        "print(json.dumps({'model': r.model, 'text': r.choices[0].message.content, "
        "'usage': str(r.usage)}))\n"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DemoError(f"the chat request to {base} failed: {last}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def main() -> int:
    try:
        run(Cluster(), out=lambda text: print(text, flush=True))
    except DemoError as e:
        print(f"\nmake demo: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
