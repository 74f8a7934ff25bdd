"""The router hop (llmfleet.routerhop) in every router pod: it takes the router Service's port,
holds a request until the Ready engines have room for it (late binding), and sends a request
for an adapter only to an engine marked as serving it, the rest to vllm-router, which moves to
loopback ports in the same pod.

The hop runs from the operator's image under the hop's own version (routerhop.release), so an
operator release that leaves the hop alone leaves the router pods alone too."""

from __future__ import annotations

import copy
from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.names import HTTP_PORT, Owner, selector_labels

HOP_CONTAINER = "router-hop"
# vllm-router behind the hop: reachable from inside the pod only. Not declared as container
# ports, since nothing outside the pod may call them.
LOOPBACK = "127.0.0.1"
ROUTER_LOOPBACK_PORT = HTTP_PORT + 1
ROUTER_LOOPBACK_METRICS_PORT = 29001
# A request for an adapter no engine serves yet waits this long: the operator's bound on one
# adapter load (reconcile.llmdeployment.adapters.LOAD_TIMEOUT_SECONDS), after which status says
# the load failed and waiting longer helps no one.
HOLD_SECONDS = 120
HOP_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
ADAPTERS_ENV = "LLMFLEET_ADAPTERS"


# Beyond its batch, each engine may queue this many more than the HPA's target on its own:
# enough to keep its batch full between one request finishing and the hop sending the next, and
# one over the target so that what reads the engines' queue (the HPA's Pods metric, a standby
# engine's wake, both "above targetQueueDepth") still sees a surge the hop holds back.
QUEUE_OVER_TARGET = 1


def queue_per_engine(plan: Plan) -> int:
    return plan.target_queue_depth + QUEUE_OVER_TARGET


def hold_seconds(spec: LLMDeploymentSpec) -> int:
    """How long a request for an adapter waits: a load; at zero engines also the wake (the
    hop's held requests wake the LLMDeployment: render.scaledobject), as vllm-router holds the
    base's."""
    wake = spec.autoscaling.wake_timeout if spec.autoscaling.scales_to_zero else 0
    return wake + HOLD_SECONDS


def admit_seconds(spec: LLMDeploymentSpec, plan: Plan) -> int:
    """How long a request waits for room on the engines: while the fleet is full, room comes
    when the autoscaler's new engine starts, which may take up to its startupProbe's budget;
    past that the engine failed to start and waiting longer helps no one."""
    return hold_seconds(spec) + plan.startup_budget_seconds


def behind_hop(args: list[str]) -> list[str]:
    """vllm-router's arguments with its listening addresses moved to loopback."""
    moved = {
        "--host": LOOPBACK,
        "--port": str(ROUTER_LOOPBACK_PORT),
        "--prometheus-host": LOOPBACK,
        "--prometheus-port": str(ROUTER_LOOPBACK_METRICS_PORT),
    }
    return [moved.get(args[i - 1], a) if i else a for i, a in enumerate(args)]


def adapters_env(spec: LLMDeploymentSpec) -> dict[str, Any]:
    """No `env` at all without adapters (the hop reads a missing variable as none): the API
    server drops an empty `value` or `env`, and a rendered one the live pod lacks reads as drift
    (reconcile.machinery.drift), so every resync would rewrite the router's Deployment."""
    names = ",".join(sorted(a.name for a in spec.adapters))
    return {"env": [{"name": ADAPTERS_ENV, "value": names}]} if names else {}


def hop_container(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, image: str, metrics_port: int
) -> dict[str, Any]:
    engines = selector_labels(owner)
    health = {"httpGet": {"path": "/health", "port": "http"}}
    return {
        "name": HOP_CONTAINER,
        "image": image,
        "command": ["python", "-m", "llmfleet.routerhop"],
        "args": [
            "--host",
            "0.0.0.0",
            "--port",
            str(HTTP_PORT),
            "--metrics-port",
            str(metrics_port),
            "--upstream-host",
            LOOPBACK,
            "--router-port",
            str(ROUTER_LOOPBACK_PORT),
            "--router-metrics-port",
            str(ROUTER_LOOPBACK_METRICS_PORT),
            "--engine-port",
            str(HTTP_PORT),
            "--namespace",
            owner.namespace,
            "--selector",
            *(f"{k}={v}" for k, v in sorted(engines.items())),
            "--base-model",
            spec.served_model_name,
            "--hold-seconds",
            str(hold_seconds(spec)),
            # Room: each router pod takes an even share (the Service spreads connections).
            "--slots-per-engine",
            str(plan.max_concurrent_sequences),
            "--queue-per-engine",
            str(queue_per_engine(plan)),
            "--routers",
            str(spec.router.replicas),
            "--admit-seconds",
            str(admit_seconds(spec, plan)),
        ],
        **adapters_env(spec),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"},
        ],
        "resources": HOP_RESOURCES,
        # /health passes through to vllm-router: Ready means both serve.
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        # The hop's own, answered without vllm-router: restarting the hop heals only the hop.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }


def with_hop(
    router: dict[str, Any],
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    *,
    image: str,
    metrics_port: int,
) -> list[dict[str, Any]]:
    """The router pod's containers: vllm-router on loopback (no port, no probe the kubelet could
    reach: the hop's readiness goes through it), then the hop."""
    inner = {
        k: v for k, v in router.items() if k not in ("ports", "readinessProbe", "livenessProbe")
    }
    inner["args"] = behind_hop(list(router["args"]))
    hop = hop_container(owner, spec, plan, image, metrics_port)
    # Endpoints drop the pod before either stops taking connections; then the hop drains.
    hop["lifecycle"] = copy.deepcopy(router["lifecycle"])
    return [inner, hop]
