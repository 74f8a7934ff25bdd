"""The NetworkPolicy in front of one LLMDeployment's engine pods (only when the operator runs
with --engine-network-policy): the engines' port admits this LLMDeployment's router, whatever
scrapes their metrics and the operator; nothing else reaches them.

Where there is no router the engine Service is the endpoint, so clients must reach the engines:
the policy then admits the configured clients, or any source when none are configured. A LoRA
engine's port also serves vLLM's runtime LoRA endpoints, which a NetworkPolicy cannot tell from
the OpenAI API: such a port never gets a rule without `from` (with no router and no clients it
admits only the scrapers and the operator, and the operator refuses to plan it, saying so:
`admits_every_source`; docs/security.md).

The adapter fetcher's port admits the operator's pods and nothing else, whatever the engine's
port admits: it spends credentials and writes to the node's disk. With no operator peers
configured the policy gives the port no rule at all (a rule without `from` admits every
source)."""

from __future__ import annotations

from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.planner import Plan
from llmfleet.render.fetcher import FETCHER_PORT_NAME, runs_fetcher
from llmfleet.render.names import (
    COMPONENT_ENGINE,
    COMPONENT_ENGINE_WORKER,
    COMPONENT_LABEL,
    DEPLOYMENT_LABEL,
    Owner,
    group_selector,
    metadata,
    selector_labels,
)
from llmfleet.render.router import COMPONENT_ROUTER, router_enabled

API_VERSION = "networking.k8s.io/v1"
ENGINE_PORT_NAME = "http"


def admits_every_source(spec: LLMDeploymentSpec, plan: Plan, policy: EngineNetworkPolicy) -> bool:
    """Whether the engines' port would be open to every source: no router in front and no
    clients configured. Fine for the OpenAI API; not for a LoRA engine's runtime endpoints."""
    return not router_enabled(spec, plan) and not policy.clients


def render_network_policy(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, policy: EngineNetworkPolicy
) -> dict[str, Any]:
    if router_enabled(spec, plan):
        callers = [{"podSelector": {"matchLabels": selector_labels(owner, COMPONENT_ROUTER)}}]
    else:
        callers = list(policy.clients)
    rule: dict[str, Any] = {"ports": [{"port": ENGINE_PORT_NAME, "protocol": "TCP"}]}
    if callers or plan.lora is not None:
        # A rule without `from` admits every source; with one, only the peers listed.
        rule["from"] = [*callers, *policy.scrapers, *policy.operator]
    rules = [rule]
    if runs_fetcher(plan) and policy.operator:
        rules.append(
            {
                "from": list(policy.operator),
                "ports": [{"port": FETCHER_PORT_NAME, "protocol": "TCP"}],
            }
        )
    if plan.pipeline_parallel_size > 1:
        # A multi-node replica's pods reach each other on ports vLLM and NCCL pick at run time.
        rules.append({"from": [{"podSelector": group_selector(owner, plan)}]})
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": metadata(owner, owner.name),
        "spec": {
            "podSelector": {
                "matchLabels": {DEPLOYMENT_LABEL: owner.name},
                "matchExpressions": [
                    {
                        "key": COMPONENT_LABEL,
                        "operator": "In",
                        "values": [COMPONENT_ENGINE, COMPONENT_ENGINE_WORKER],
                    }
                ],
            },
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }
