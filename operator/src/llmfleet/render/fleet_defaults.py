"""What the operator's settings say about the objects it renders, as one value: the render
functions and the controllers take it whole, and none of its fields has a default of its own
(the defaults are the settings', llmfleet/settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from llmfleet.models.network_policy import EngineNetworkPolicy


@dataclass(frozen=True)
class FleetDefaults:
    # Runs the engines of LLMDeployments whose spec.engine.image is unset.
    engine_image: str
    # Runs the adapter fetcher beside single-node LoRA engines.
    fetcher_image: str
    # Runs the router hop in the router pods of LLMDeployments with adapters.
    router_hop_image: str
    # PriorityClass of LLMDeployments' engine pods; "": the cluster's default priority.
    engine_priority_class: str
    # PriorityClass of Spare LLMBatchJobs' pods; "": such jobs wait, reported.
    spare_priority_class: str
    # None: the engines get no NetworkPolicy.
    network_policy: EngineNetworkPolicy | None
    # The Prometheus a scale-to-zero ScaledObject queries; "": scale to zero is refused.
    keda_prometheus_url: str
