"""Scale-to-zero figures on the local cluster: real vLLM engines (the tiny model on the CPU, node
runner), the real operator, KEDA built from its Go modules, Prometheus, and the vLLM Router.

* `scale_from_zero_first_token_s`: a client sends one streamed completion to the router while the
  LLMDeployment has no engine pod; seconds until its first token. It includes KEDA noticing the
  router's held request (Prometheus scrape, KEDA's 5 s poll), the pod's scheduling, vLLM's start
  (on 2 CPU cores, most of it) and the router picking the engine up. Median of RUNS cycles (and
  the worst).
* `scale_to_zero_idle_s`: seconds from the end of the last request until no engine pod is left,
  with `idleSeconds: IDLE_SECONDS`: KEDA's cooldown after the last poll that saw demand (the
  `[1m]` window of finished requests), then the pod's drain.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import yaml
from kubernetes import client
from kubernetes import config as k8s_config
from localcluster.metricsstack import MetricsStack
from localcluster.metricsstack.load import delete_llmd, exactly_free_gpus, wait_until
from localcluster.metricsstack.zero import at_zero, router_ip, stream_completion, zero_llmd
from localcluster.operator_process import Operator
from localcluster.supervisor import Cluster

NODE_GPUS = 1
RUNS = 3
IDLE_SECONDS = 30
WAKE_TIMEOUT_SECONDS = 300
NAME = "zero"


def cycle(api: client.ApiClient, ns: str) -> dict[str, float]:
    """One request at zero, then the wait until the LLMDeployment is back at zero."""
    core = client.CoreV1Api(api)
    rip = wait_until(lambda: router_ip(core, ns, NAME), 120, 1, "the router Ready")
    answer = stream_completion(f"http://{rip}:8000/v1", timeout=WAKE_TIMEOUT_SECONDS + 30)
    if answer.status != 200 or not answer.tokens:
        raise RuntimeError(f"the request at zero was not answered: {answer}")
    done = time.monotonic()
    wait_until(lambda: at_zero(api, ns, NAME), IDLE_SECONDS + 300, 1, "back at zero")
    idle = time.monotonic() - done
    print(f"   first token {answer.first_token_s:.1f}s at zero; back at zero {idle:.0f}s after")
    return {"first_token": answer.first_token_s, "idle": idle}


def run() -> dict[str, float]:
    cluster = Cluster()
    cluster.ensure_up()
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    was_running = cluster.alive("node-runner")
    node = cluster.start_node_runner(gpus=NODE_GPUS)
    stack = MetricsStack(cluster).start()
    op = Operator(cluster, chart_values=(f"keda.prometheusUrl={stack.prometheus_url}",))
    op.install_identity()
    op.start()
    core = client.CoreV1Api(api)
    ns = f"bench-zero-{uuid.uuid4().hex[:5]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    runs: list[dict[str, float]] = []
    try:
        exactly_free_gpus(core, ns, node, NODE_GPUS)
        body: dict[str, Any] = zero_llmd(NAME, IDLE_SECONDS, WAKE_TIMEOUT_SECONDS)
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(body))
        wait_until(lambda: at_zero(api, ns, NAME), IDLE_SECONDS + 300, 1, "first at zero")
        for _ in range(RUNS):
            runs.append(cycle(api, ns))
        delete_llmd(api, ns, NAME)
    finally:
        core.delete_namespace(ns)
        op.kill()
        if not was_running:
            cluster.stop_node_runner()
    first = [r["first_token"] for r in runs]
    idle = [r["idle"] for r in runs]
    return {
        "scale_from_zero_first_token_s": statistics.median(first),
        "scale_from_zero_first_token_max_s": max(first),
        "scale_to_zero_idle_s": statistics.median(idle),
    }
