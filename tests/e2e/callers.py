"""A caller no one gave a credential: an unprivileged pod (the `restricted` Pod Security Standard,
no ServiceAccount token) that makes HTTP calls and reports each answer's status, and what a
NetworkPolicy, as the API server stores it, admits of such a pod.

The pod runs on a node runner from an image built here (docs/cpu-adaptations.md, "container"):
the calls go out as any pod's would. It reports through its termination message (the kubelet's
`terminated.message`), a JSON list of status codes in the order of the calls; 0 means the call
got no HTTP answer at all (refused connection, timeout), which a test must not count as a door
that refused."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client

from .harness import wait_until

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
CALLER_LABELS = {"app.kubernetes.io/name": "curious-caller"}
RUNS_WITHIN = 60.0  # a container of a built image, read-only root: it starts in a second or two

# Standard library only, and no "$(" anywhere: the kubelet would expand it as a variable.
_SCRIPT = """
import json, os, urllib.error, urllib.request
codes = []
for c in json.loads(os.environ["CALLS"]):
    body = None if c["body"] is None else json.dumps(c["body"]).encode()
    headers = {"Content-Type": "application/json", **c["headers"]}
    req = urllib.request.Request(c["url"], body, headers=headers, method=c["method"])
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            codes.append(r.status)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
    except OSError:
        codes.append(0)
with open("/dev/termination-log", "w") as f:
    f.write(json.dumps(codes))
"""


@dataclass(frozen=True)
class Call:
    method: str
    url: str
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def caller_pod(name: str, node: str, image: str, calls: list[Call]) -> dict[str, Any]:
    """A pod that passes `restricted`: non-root, no capabilities, no privilege escalation,
    read-only root, RuntimeDefault seccomp, and no ServiceAccount token to present."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(CALLER_LABELS)},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "caller",
                    "image": image,
                    "command": ["python3", "-c", _SCRIPT],
                    "env": [{"name": "CALLS", "value": json.dumps([asdict(c) for c in calls])}],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
        },
    }


def run_caller(
    core: client.CoreV1Api, namespace: str, node: str, image: str, calls: list[Call]
) -> tuple[client.V1Pod, list[int]]:
    """Run the caller pod in `namespace` on `node` until it ends; the pod and the status code of
    each call."""
    body = caller_pod("caller", node, image, calls)

    def created() -> bool:
        try:
            core.create_namespaced_pod(namespace, body)
        except client.ApiException as e:
            # A fresh namespace's `default` ServiceAccount comes from the controller manager a
            # moment after the namespace: until then the API server refuses pods.
            if e.status == 403 and "serviceaccount" in str(e.body).lower():
                return False
            raise
        return True

    wait_until(created, 30, 0.2, f"the caller pod admitted in {namespace}")

    def ended() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("caller", namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    try:
        pod: client.V1Pod = wait_until(ended, RUNS_WITHIN, 0.5, "the caller pod done")
    except AssertionError:
        status = core.read_namespaced_pod("caller", namespace).status
        raise AssertionError(f"the caller pod did not end: {status}") from None
    (status,) = pod.status.container_statuses
    terminated = status.state.terminated
    assert pod.status.phase == "Succeeded", (pod.status.phase, terminated)
    codes = json.loads(terminated.message)
    assert len(codes) == len(calls), codes
    return pod, [int(c) for c in codes]


def selector_text(selector: dict[str, Any]) -> str:
    """A LabelSelector (camelCase, as the API serves it) in the API server's query syntax."""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op = expr["operator"]
        if op in ("Exists", "DoesNotExist"):
            terms.append(expr["key"] if op == "Exists" else f"!{expr['key']}")
        else:
            terms.append(f"{expr['key']} {op.lower()} ({','.join(expr['values'])})")
    return ",".join(terms)


def covers(rule: dict[str, Any], port: tuple[str, int]) -> bool:
    """Whether an ingress rule applies to the container port (name, number): a rule without
    `ports` applies to every port."""
    ports = rule.get("ports")
    return not ports or any(p.get("port") in port for p in ports)


def admits(
    core: client.CoreV1Api, policy_namespace: str, peer: dict[str, Any], pod: client.V1Pod
) -> bool:
    """Whether the NetworkPolicy peer `peer` (of a policy in `policy_namespace`) selects `pod`,
    answered by the API server's own selector queries against the objects that are there."""
    if (block := peer.get("ipBlock")) is not None:
        ip = ipaddress.ip_address(pod.status.pod_ip)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    namespace, name = pod.metadata.namespace, pod.metadata.name
    if "namespaceSelector" in peer:
        in_namespace = bool(
            core.list_namespace(
                label_selector=selector_text(peer["namespaceSelector"] or {}),
                field_selector=f"metadata.name={namespace}",
            ).items
        )
    else:
        in_namespace = namespace == policy_namespace  # no namespaceSelector: the policy's own
    if not in_namespace or "podSelector" not in peer:
        return in_namespace
    return bool(
        core.list_namespaced_pod(
            namespace,
            label_selector=selector_text(peer["podSelector"] or {}),
            field_selector=f"metadata.name={name}",
        ).items
    )
