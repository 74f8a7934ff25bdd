"""Who may reach the engine pods, when the operator renders a NetworkPolicy for each
LLMDeployment (operator flag --engine-network-policy, Helm value engine.networkPolicy).

The operator knows the router (it renders it); where Prometheus and the operator itself run is
the cluster's business, so the chart passes them in as NetworkPolicy peers."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from llmfleet.models.base import ApiModel

PEER_KEYS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})


def _peers(value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    for i, peer in enumerate(value):
        unknown = set(peer) - PEER_KEYS
        if not peer or unknown:
            raise ValueError(
                f"peer {i} must be a NetworkPolicyPeer with some of {sorted(PEER_KEYS)}; "
                f"got {sorted(peer) or 'nothing'}"
            )
    return value


class EngineNetworkPolicy(ApiModel):
    """The peers admitted to the engines' port besides this LLMDeployment's own router."""

    scrapers: tuple[dict[str, Any], ...] = Field(
        default=(), description="What scrapes the engines' /metrics (Prometheus)."
    )
    operator: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="The operator's pods: it reads each engine's KV-cache size (PlanVerified).",
    )
    clients: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="Who may call the engines where they are the endpoint (no router); "
        "empty admits any client there.",
    )

    _check = field_validator("scrapers", "operator", "clients")(_peers)


def parse_engine_network_policy(text: str) -> EngineNetworkPolicy | None:
    """The flag's JSON; empty means no NetworkPolicy."""
    if not text.strip():
        return None
    return EngineNetworkPolicy.model_validate(json.loads(text))
