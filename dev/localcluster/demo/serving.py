"""The demo's chat request to the tiny model: the endpoint its status names, as a URL this
machine can dial, and the request sent as a user's program would send it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..routerapi import routed_engines
from ..supervisor import REPO, Cluster

INSTALL_VLLM = REPO / "dev" / "dataplane" / "install-vllm.sh"
COMPONENT_LABEL = "app.kubernetes.io/component"


class DemoError(Exception):
    """A step of the demo that did not come true; the message says what is not ready."""


def run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def reach(cluster: Cluster, endpoint: str) -> tuple[str, str]:
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


def wait_routing(base: str, timeout: float) -> None:
    """The vLLM Router discovers engines through the Kubernetes API, a few seconds after they
    are Ready: wait until it routes to one."""
    host = urlsplit(base).hostname or ""
    deadline = time.monotonic() + timeout
    while not routed_engines(host):
        if time.monotonic() > deadline:
            raise DemoError(f"the vLLM Router at {host} routes to no engine after {timeout:.0f}s")
        time.sleep(2)


def chat(base: str) -> dict[str, Any]:
    """One chat request with the OpenAI client, as a user's program would send it."""
    python = Path(run(str(INSTALL_VLLM), "--print-path").strip().splitlines()[-1]) / "bin/python"
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
