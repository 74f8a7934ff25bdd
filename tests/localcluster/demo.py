"""`make demo`: the local cluster with fake GPU nodes, the chart, the examples and their plans, and
a real vLLM answering. Everything stays up afterwards; `make cluster-down` stops it all."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from e2e.harness import OPERATOR_NAMESPACE, RELEASE, Operator, wait_for

from localcluster.supervisor import REPO, Cluster, bindir

EXAMPLES = REPO / "examples"
DEMO_NAMESPACE = "llmfleet-demo"


def step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def llmfleet(*args: str) -> str:
    return run(str(Path(sys.executable).parent / "llmfleet"), *args)


def main() -> int:
    cluster = Cluster()
    kubectl = cluster.kubectl
    helm = [str(bindir("helm") / "helm"), f"--kubeconfig={cluster.kubeconfig}"]

    step("Nodes: two fake 8x H100 nodes, one CPU node (kwok)")
    print(kubectl("get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count"))

    step("Plans, offline (llmfleet plan), for every example")
    for f in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(f.read_text()) if d]
        if any(d.get("kind") == "LLMDeployment" for d in docs):
            print(f"--- {f.relative_to(REPO)}")
            print(llmfleet("plan", "-f", str(f)))

    step("helm upgrade --install llmfleet charts/llmfleet")
    # kwok nodes run no containers, so the chart installs everything but the operator pod
    # (replicas=0) and the operator runs here as a process with the chart's ServiceAccount token.
    operator = Operator(cluster, resync_seconds=60)
    if not cluster.alive("operator"):
        operator.install_identity()
        operator.start()
    print(run(*helm, "status", RELEASE, "--namespace", OPERATOR_NAMESPACE))
    print(f"operator running as {operator.username}; log: {operator.log_path}")

    step("kubectl apply -f examples/ (GPU examples land on the fake H100 nodes)")
    kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DEMO_NAMESPACE}}
        ),
    )
    for name in ("llama-3.1-70b-8xh100.yaml", "llama-3.1-8b-multipod.yaml", "qwen2.5-72b-fp8.yaml"):
        print(kubectl("apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / name)).strip())
    time.sleep(5)
    print(kubectl("get", "llmd", "-n", DEMO_NAMESPACE))
    print(kubectl("get", "deploy,hpa,pdb,pods", "-n", DEMO_NAMESPACE, "-o", "wide"))

    step("A real vLLM: the tiny model on the local emulated-GPU node")
    cluster.start_node_runner()
    print(
        kubectl(
            "apply", "-n", DEMO_NAMESPACE, "-f", str(EXAMPLES / "tiny-local-cluster.yaml")
        ).strip()
    )

    def ready_pod_ip() -> str | None:
        pods = json.loads(
            kubectl(
                "get",
                "pods",
                "-n",
                DEMO_NAMESPACE,
                "-l",
                "llmfleet.dev/deployment=tiny-local",
                "-o",
                "json",
            )
        )["items"]
        for p in pods:
            conds = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
            if conds.get("Ready") == "True":
                ip: str = p["status"]["podIP"]
                return ip
        return None

    ip = wait_for(ready_pod_ip, timeout=600, interval=2, what="tiny-local vLLM Ready")
    print(kubectl("get", "llmd", "tiny-local", "-n", DEMO_NAMESPACE))
    vllm_python = (
        Path(
            run(str(REPO / "tests" / "dataplane" / "install-vllm.sh"), "--print-path")
            .strip()
            .splitlines()[-1]
        )
        / "bin"
        / "python"
    )
    answer = run(
        str(vllm_python),
        "-c",
        (
            "import openai, sys\n"
            f"c = openai.OpenAI(base_url='http://{ip}:8000/v1', api_key='none')\n"
            "r = c.chat.completions.create(model='tiny', max_tokens=24, "
            "messages=[{'role': 'user', 'content': 'Hello, fleet!'}])\n"
            "print('model:', r.model); print('answer:', repr(r.choices[0].message.content)); "
            "print('usage:', r.usage)\n"
        ),
    )
    print(
        f"POST http://{ip}:8000/v1/chat/completions (a random tiny model: the words are noise,"
        " the serving path is real)"
    )
    print(answer)

    step("Explore")
    print(
        f"export KUBECONFIG={cluster.kubeconfig}\n"
        f"kubectl get llmd -n {DEMO_NAMESPACE}\n"
        f"kubectl describe llmd llama-3-1-70b -n {DEMO_NAMESPACE}\n"
        "make cluster-down   # stops the cluster, the operator and the vLLM processes"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
