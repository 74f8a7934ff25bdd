"""Scale to zero on the local cluster: an LLMDeployment of the tiny model with minReplicas 0, and
what a client sees of it (how long the first token of a request sent at zero takes).

Shared by the e2e test (tests/e2e/test_scale_to_zero.py) and the benchmark (bench/scale_to_zero.py).
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from .load import pod_ready, tiny_llmd

# What clients call the model: a name of its own, since the node runner rewrites --model to a
# local directory (which vLLM would otherwise serve it as).
MODEL = "tiny"


def zero_llmd(name: str, idle_seconds: int, wake_timeout_seconds: int) -> dict[str, Any]:
    body = tiny_llmd(
        name,
        minReplicas=0,
        maxReplicas=1,
        idleSeconds=idle_seconds,
        wakeTimeoutSeconds=wake_timeout_seconds,
    )
    body["spec"]["model"]["servedModelName"] = MODEL
    return body


def engine_selector(name: str) -> str:
    return f"llmfleet.dev/deployment={name},app.kubernetes.io/component=engine"


def router_selector(name: str) -> str:
    return f"llmfleet.dev/deployment={name},app.kubernetes.io/component=router"


def engine_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[Any]:
    """Every engine pod, terminating ones too: at zero there is none at all."""
    return list(core.list_namespaced_pod(namespace, label_selector=engine_selector(name)).items)


def at_zero(api: client.ApiClient, namespace: str, name: str) -> bool:
    """The engine Deployment asks for 0 pods and none is left."""
    apps = client.AppsV1Api(api)
    deployments = apps.list_namespaced_deployment(
        namespace, label_selector=engine_selector(name)
    ).items
    return (
        bool(deployments)
        and all((d.spec.replicas or 0) == 0 for d in deployments)
        and not engine_pods(client.CoreV1Api(api), namespace, name)
    )


def router_ip(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    for pod in core.list_namespaced_pod(namespace, label_selector=router_selector(name)).items:
        if pod_ready(pod) and not pod.metadata.deletion_timestamp:
            return str(pod.status.pod_ip)
    return None


@dataclass(frozen=True)
class Answer:
    status: int
    first_token_s: float  # from sending the request to its first streamed token
    total_s: float
    tokens: int  # completion tokens, as the engine counted them


def stream_completion(
    base: str, timeout: float, max_tokens: int = 16, model: str = MODEL
) -> Answer:
    """One streamed completion through `base` (…/v1), timed as a client would."""
    body = json.dumps(
        {
            "model": model,
            "prompt": "The first request after a quiet night",
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
        }
    ).encode()
    request = urllib.request.Request(
        f"{base}/completions", data=body, headers={"Content-Type": "application/json"}
    )
    start = time.monotonic()
    first: float | None = None
    tokens = 0
    with urllib.request.urlopen(request, timeout=timeout) as response:
        status = int(response.status)
        for raw in response:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):  # the last chunk: what the engine generated
                tokens = int(chunk["usage"]["completion_tokens"])
            if chunk.get("choices") and chunk["choices"][0].get("text") and first is None:
                first = time.monotonic() - start
    total = time.monotonic() - start
    return Answer(status, total if first is None else first, total, tokens)
