"""`spec.router`: the vLLM Router (vllm-project/router) in front of the engine pods."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from llmfleet.models.base import ApiModel
from llmfleet.models.engine import ContainerResources

# Our build of PyPI vllm-router 0.1.17 (images/router/Dockerfile): the upstream image repository
# (vllm/vllm-router) publishes nightly tags only, and a nightly cannot be pinned to a release.
DEFAULT_ROUTER_IMAGE = "docker.io/llmfleet/vllm-router:0.1.17"
DEFAULT_ROUTER_POLICY: Final = "power_of_two"
MAX_ROUTER_REPLICAS = 20

RouterPolicy = Literal["power_of_two", "round_robin", "cache_aware", "consistent_hash", "random"]


class RouterSpec(ApiModel):
    """A load-aware request router in front of the engine pods: a Kubernetes Service balances
    connections, the router balances requests, so one pod does not queue while another idles."""

    enabled: bool | None = Field(
        default=None,
        description=(
            "Run the router. Default: on when the fleet can have more than one engine pod "
            "(autoscaling maxReplicas, or the planned replicas without autoscaling, above 1)."
        ),
    )
    policy: RouterPolicy = Field(
        default=DEFAULT_ROUTER_POLICY,
        description=(
            "How the router picks an engine pod per request. power_of_two: the less loaded "
            "(fewest requests in flight through the router) of two random ready pods; with one "
            "pod, that pod. round_robin, random: ignore load. cache_aware: prefix-cache affinity, "
            "balancing only above a load imbalance threshold. consistent_hash: session affinity "
            f"(X-Session-ID and similar headers). Default {DEFAULT_ROUTER_POLICY}."
        ),
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_ROUTER_REPLICAS,
        description=(
            "Router pods. Each counts only the requests it routes itself, so power_of_two "
            "balances best with one; use 2 for availability. Default 1."
        ),
    )
    image: str = Field(
        default=DEFAULT_ROUTER_IMAGE,
        min_length=1,
        max_length=512,
        description=(
            "Image that runs `vllm-router` (PyPI vllm-router, with its Kubernetes service "
            f"discovery). Default {DEFAULT_ROUTER_IMAGE}."
        ),
    )
    resources: ContainerResources | None = Field(
        default=None,
        description=(
            "cpu/memory requests and limits of the router container, merged over the "
            "defaults (requests cpu 500m, memory 256Mi)."
        ),
    )
