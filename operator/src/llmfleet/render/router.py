"""The vLLM Router in front of the engine pods: its Deployment and Service, and the
ServiceAccount, Role and RoleBinding its Kubernetes service discovery runs as.

The router (PyPI vllm-router, vllm-project/router) watches the pods of its namespace, keeps those
that carry this LLMDeployment's engine labels, and routes each request to one of them: a pod joins
once it is Running and Ready (and answers /health), and leaves as soon as it has a
deletionTimestamp, so a draining pod (preStop sleep, vLLM --shutdown-timeout) gets no new request.
See docs/router.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.engine import PROBE_PERIOD_SECONDS
from llmfleet.render.names import (
    HTTP_PORT,
    Owner,
    metadata,
    pod_template_labels,
    selector_labels,
)
from llmfleet.render.podspec import node_placement, pod_security_context
from llmfleet.render.routerhop import with_hop

COMPONENT_ROUTER = "router"
ROUTER_COMMAND = "vllm-router"
METRICS_PORT = 29000
ROUTER_LOG = "info,vllm_router_rs::policies=warn"
DEFAULT_REQUESTS = {"cpu": "500m", "memory": "256Mi"}
# A pod that is Ready answers /health at once; this bounds how long one that does not can hold up
# the router's (sequential) handling of later pod events.
WORKER_STARTUP_TIMEOUT_SECONDS = 60
WORKER_STARTUP_CHECK_SECONDS = 1
# The router's own health checks of each engine (its default is 60 s): a crashed engine is marked
# unhealthy within about 3 x this, before Kubernetes' readiness (and discovery) catches up.
HEALTH_CHECK_INTERVAL_SECONDS = 10
# A crashed engine with nothing in flight looks least loaded, so power_of_two sends every retry
# of a request to it until its circuit opens; upstream opens it after 10 failures in a row, more
# than the 5 attempts (upstream's default) one request makes, so a request could spend them all on
# the dead engine and fail (tests/e2e/test_router.py saw it). Opening after fewer failures than a
# request's attempts leaves each request at least RETRY_ATTEMPTS - CIRCUIT_BREAKER_FAILURES tries on
# another engine.
RETRY_ATTEMPTS = 5
CIRCUIT_BREAKER_FAILURES = 3
TERMINATION_GRACE_SECONDS = 30
PRESTOP_SLEEP_SECONDS = 5
RBAC_API = "rbac.authorization.k8s.io"
# Scale to zero: the router holds a request while no engine is ready by retrying it, re-reading
# its engines on every attempt, with backoff from 50 ms up to HOLD_RETRY_INTERVAL_MS.
# RETRY_RAMP attempts cover the ramp (50 ms x 1.5^k reaches 2 s at k = 9; about 6 s in all),
# then one attempt per interval fills the rest of spec.autoscaling.wakeTimeoutSeconds.
HOLD_RETRY_INTERVAL_MS = 2000
HOLD_RETRY_RAMP = 10

# cache_aware balances by load only when the busiest engine has more than `--balance-abs-threshold`
# requests in flight through the router above the idlest (and 1.5x as many). Upstream's 64 is a
# quarter of a GPU engine's 256-sequence batch; with engines of a few slots it never fires, and a
# tenant's prefix piles its whole queue on one engine while another idles. So: a quarter of the
# planned batch (--max-num-seqs), at least CACHE_AWARE_MIN_BALANCE_THRESHOLD, the value
# bench/router_prefix.py ran with on 2-slot engines (docs/router.md).
CACHE_AWARE_MIN_BALANCE_THRESHOLD = 4


def cache_aware_balance_threshold(max_num_seqs: int) -> int:
    return max(CACHE_AWARE_MIN_BALANCE_THRESHOLD, max_num_seqs // 4)


def policy_args(policy: str, max_num_seqs: int) -> list[str]:
    """The router flags that go with `--policy policy` in front of engines that each run up to
    `max_num_seqs` sequences (only cache_aware has any beyond the policy)."""
    if policy == "cache_aware":
        threshold = cache_aware_balance_threshold(max_num_seqs)
        return ["--policy", policy, "--balance-abs-threshold", str(threshold)]
    return ["--policy", policy]


def router_enabled(spec: LLMDeploymentSpec, plan: Plan) -> bool:
    """spec.router.enabled, or by default: on when the fleet can have more than one pod or
    scales to zero."""
    if spec.router.enabled is not None:
        return spec.router.enabled
    # At zero engines someone must hold the requests that wake one: the router.
    return plan.max_replicas > 1 or spec.autoscaling.scales_to_zero


def router_name(owner_name: str) -> str:
    return f"{owner_name}-router"


def router_url(owner: Owner) -> str:
    return f"http://{router_name(owner.name)}.{owner.namespace}.svc:{HTTP_PORT}/v1"


def router_args(owner: Owner, spec: LLMDeploymentSpec, plan: Plan) -> list[str]:
    engines = selector_labels(owner)
    return [
        "--host",
        "0.0.0.0",
        "--port",
        str(HTTP_PORT),
        *policy_args(spec.router.policy, plan.max_concurrent_sequences),
        # Discovery: this LLMDeployment's engine pods (every layout), in its own namespace only.
        "--service-discovery",
        "--service-discovery-namespace",
        owner.namespace,
        "--service-discovery-port",
        str(HTTP_PORT),
        "--selector",
        *(f"{k}={v}" for k, v in sorted(engines.items())),
        "--worker-startup-timeout-secs",
        str(WORKER_STARTUP_TIMEOUT_SECONDS),
        "--worker-startup-check-interval",
        str(WORKER_STARTUP_CHECK_SECONDS),
        "--health-check-interval-secs",
        str(HEALTH_CHECK_INTERVAL_SECONDS),
        "--cb-failure-threshold",
        str(CIRCUIT_BREAKER_FAILURES),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(METRICS_PORT),
        *(
            hold_args(spec.autoscaling.wake_timeout)
            if spec.autoscaling.scales_to_zero
            else ["--retry-max-retries", str(RETRY_ATTEMPTS)]
        ),
    ]


def hold_args(seconds: int) -> list[str]:
    """Retry flags that hold a request for about `seconds` while no engine is ready (vllm-router
    0.1.17 answers 503 after its default 5 retries, about 0.4 s)."""
    retries = HOLD_RETRY_RAMP + -(-seconds * 1000 // HOLD_RETRY_INTERVAL_MS)
    return [
        "--retry-max-retries",
        str(retries),
        "--retry-max-backoff-ms",
        str(HOLD_RETRY_INTERVAL_MS),
    ]


def _resources(spec: LLMDeploymentSpec) -> dict[str, Any]:
    user = spec.router.resources
    requests = {**DEFAULT_REQUESTS, **dict((user.requests or {}) if user else {})}
    limits = dict((user.limits or {}) if user else {})
    out: dict[str, Any] = {"requests": dict(sorted(requests.items()))}
    if limits:
        out["limits"] = dict(sorted(limits.items()))
    return out


def render_router_deployment(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, hop_image: str
) -> dict[str, Any]:
    """The router's Deployment: the router hop (render.routerhop), run from `hop_image`, in front
    of vllm-router."""
    name = router_name(owner.name)
    health = {"httpGet": {"path": "/health", "port": "http"}}
    container: dict[str, Any] = {
        "name": "router",
        "image": spec.router.image,
        "command": [ROUTER_COMMAND],
        "args": router_args(owner, spec, plan),
        # 0.1.17's --log-level does not reach the Rust core; RUST_LOG does. Discovery (engines
        # added and removed) stays at INFO; the per-request policy decisions are in the metrics.
        "env": [{"name": "RUST_LOG", "value": ROUTER_LOG}],
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(spec),
        # /health answers while the process serves, with or without engines: a router with no
        # ready engine stays in its Service and answers 503 (retryable) rather than refusing.
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {
            **health,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Endpoints drop the pod before it stops taking connections.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": name,
        # Discovery reads pods with this account's token (the Role below).
        "automountServiceAccountToken": True,
        # The hop in front: late binding for every request, adapters to their engines.
        "containers": with_hop(
            container, owner, spec, plan, image=hop_image, metrics_port=METRICS_PORT
        ),
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": pod_security_context(fs_group=False),
    }
    # The router runs in the engines' node pool (same nodeSelector, tolerating the GPU taint):
    # one hop from its engines, and it needs no node of its own. It requests no GPU.
    pod_spec.update(node_placement(plan))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(owner, name, COMPONENT_ROUTER),
        "spec": {
            "replicas": spec.router.replicas,
            "selector": {"matchLabels": selector_labels(owner, COMPONENT_ROUTER)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": pod_template_labels(owner, COMPONENT_ROUTER),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(METRICS_PORT),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def render_router_service(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner, router_name(owner.name), COMPONENT_ROUTER),
        "spec": {
            "selector": selector_labels(owner, COMPONENT_ROUTER),
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render_router_rbac(owner: Owner) -> list[dict[str, Any]]:
    """The router's identity: it may read pods in its namespace, nothing else. Kubernetes
    cannot narrow a Role to a label selector; the router filters by label itself."""
    name = router_name(owner.name)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(owner, name, COMPONENT_ROUTER),
    }
    role = {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": metadata(owner, name, COMPONENT_ROUTER),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(owner, name, COMPONENT_ROUTER),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }
    return [account, role, binding]


@dataclass(frozen=True)
class RouterObjects:
    """The router's identity (ServiceAccount, Role, RoleBinding), its Service and Deployment."""

    service_account: dict[str, Any]
    role: dict[str, Any]
    role_binding: dict[str, Any]
    service: dict[str, Any]
    deployment: dict[str, Any]

    def objects(self) -> list[dict[str, Any]]:
        return [self.service_account, self.role, self.role_binding, self.service, self.deployment]


def render_router(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, hop_image: str
) -> RouterObjects | None:
    """Everything the router needs, or None when it is off; `hop_image` runs the router hop in
    front of vllm-router."""
    if not router_enabled(spec, plan):
        return None
    account, role, binding = render_router_rbac(owner)
    return RouterObjects(
        service_account=account,
        role=role,
        role_binding=binding,
        service=render_router_service(owner),
        deployment=render_router_deployment(owner, spec, plan, hop_image),
    )


__all__ = [
    "COMPONENT_ROUTER",
    "METRICS_PORT",
    "RouterObjects",
    "render_router",
    "router_enabled",
    "router_name",
    "router_url",
]
