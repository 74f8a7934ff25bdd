"""Where each LLMDeployment of the demo stands: its conditions, and a line on why it runs or
waits, so that a newcomer can tell the demo's lab stand-ins from what a GPU cluster would show."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..operator_process import condition
from ..supervisor import Cluster

# The node whose pods really run (dev/localcluster/noderunner); kwok's nodes run nothing.
LOCAL_NODE = "local-gpu-0"
ORDER = ("Planned", "Available", "Progressing", "ScalingLimited", "Degraded", "PlanVerified")
# After the last example is applied: Prometheus scrapes every 2 s, prometheus-adapter relists
# every 5 s, the HPA controller syncs every 5 s, then the operator writes status.
SETTLE_TIMEOUT = 120.0


def deployments(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    got = json.loads(cluster.kubectl("get", "llmd", "-n", namespace, "-o", "json"))
    items: list[dict[str, Any]] = sorted(got["items"], key=lambda d: d["metadata"]["name"])
    return items


def problems(llmds: list[dict[str, Any]]) -> list[str]:
    """What is still off: a Degraded condition, or a status not yet written for the spec."""
    found = []
    for d in llmds:
        name, status = d["metadata"]["name"], d.get("status") or {}
        if status.get("observedGeneration", 0) < d["metadata"]["generation"]:
            found.append(f"{name}: no status for its current spec yet")
        degraded = condition(d, "Degraded")
        if degraded.get("status") == "True":
            found.append(f"{name}: Degraded {degraded['reason']}: {degraded['message']}")
    return found


def wait_settled(
    cluster: Cluster, namespace: str, timeout: float = SETTLE_TIMEOUT
) -> tuple[list[dict[str, Any]], list[str]]:
    """The namespace's LLMDeployments once none is Degraded (or what is still off after
    `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        llmds = deployments(cluster, namespace)
        off = problems(llmds)
        if not off or time.monotonic() > deadline:
            return llmds, off
        time.sleep(2)


def show(cluster: Cluster, llmds: list[dict[str, Any]], out: Callable[[str], None]) -> None:
    out(
        "On kwok's fake nodes no container runs: the pods are Running and Ready with no vLLM in "
        "them. The idle-engine stand-in answers their /metrics (dev/localcluster/idleengines.py, "
        "queue 0), so their HPAs read the metric and hold minReplicas; no engine reports its "
        "KV cache, so PlanVerified stays Unknown there."
    )
    for d in llmds:
        name = d["metadata"]["name"]
        plan = (d.get("status") or {}).get("plan") or {}
        nodes = _engine_nodes(cluster, d)
        out(f"\n{name}: {plan.get('strategy', '?')}, {_where(nodes)}")
        for ctype in ORDER:
            c = condition(d, ctype)
            if not c:
                continue
            # The plan's reasoning is long and was printed above (llmfleet plan).
            message = "the layout `llmfleet plan` printed above" if ctype == "Planned" else ""
            out(f"  {ctype}={c['status']} {c['reason']}: {message or c.get('message', '')}")
        for note in _notes(d, nodes):
            out(f"  -> {note}")


def _engine_nodes(cluster: Cluster, llmd: dict[str, Any]) -> set[str]:
    pods = json.loads(
        cluster.kubectl(
            "get",
            "pods",
            "-n",
            llmd["metadata"]["namespace"],
            "-l",
            f"llmfleet.dev/deployment={llmd['metadata']['name']},"
            "app.kubernetes.io/component=engine",
            "-o",
            "json",
        )
    )["items"]
    return {p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def _where(nodes: set[str]) -> str:
    if not nodes:
        return "no engine pod on a node"
    if nodes == {LOCAL_NODE}:
        return f"a real vLLM on {LOCAL_NODE} (the node runner)"
    return f"engine pods on kwok's fake nodes {', '.join(sorted(nodes))}"


def _notes(d: dict[str, Any], nodes: set[str]) -> list[str]:
    """Why the conditions read as they do, where the lab is not a GPU cluster."""
    notes = []
    on_kwok = bool(nodes) and LOCAL_NODE not in nodes
    planned, available = condition(d, "Planned"), condition(d, "Available")
    verified = condition(d, "PlanVerified")
    if planned.get("status") == "False":
        notes.append(f"not created: {planned.get('message', '')}")
    elif available.get("status") != "True":
        limited = condition(d, "ScalingLimited")
        why = limited.get("message") if limited.get("status") == "True" else None
        notes.append(f"waits: {why or available.get('message', '')}")
    if on_kwok:
        notes.append("fake engines (kwok): the HPA scales on the idle-engine stand-in's queue")
    elif verified.get("status") == "False":
        notes.append(
            "PlanVerified=False is the CPU stand-in's doing: the plan sized the KV cache for a "
            "16 GiB GPU, the CPU engine gets 1 GiB (VLLM_CPU_KVCACHE_SPACE; "
            "docs/cpu-adaptations.md, item 9)"
        )
    return notes
