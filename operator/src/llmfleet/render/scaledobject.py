"""Scale to zero (spec.autoscaling.minReplicas 0): a KEDA ScaledObject in place of the
HorizontalPodAutoscaler.

The Kubernetes HPA cannot go below one pod, so KEDA does what it cannot: its operator scales the
engines from 0 to 1 when a trigger turns active and from 1 to 0 after `cooldownPeriod` with none
active, and it creates and owns the HPA (`keda-hpa-<name>`) that scales between 1 and
maxReplicas on the same triggers, with this module's behavior. KEDA's Prometheus scaler queries
Prometheus itself (the operator's --keda-prometheus-url), so the queue-depth rule of
prometheus-adapter is not in that path.

Two triggers:
- `queue`: vLLM's waiting requests, summed over the LLMDeployment's engines, plus the requests
  the router hop holds for room (late binding keeps them out of the engines' queues), against
  targetQueueDepth per pod: what the HPA scales 1..N on, as without scale to zero.
- `demand`: is anyone asking? Requests the router hop holds (the wake-up: at zero no engine
  exists, so no vLLM series does either) or vllm-router could not place for want of an engine,
  plus requests running, waiting or finished in the last minute on the engines (what keeps an
  engine that serves from being removed). Its target is out of reach, so it never adds pods
  beyond the first.
"""

from __future__ import annotations

from typing import Any, Final

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.autoscaling import hpa_behavior, scale_target_ref
from llmfleet.render.names import Owner, metadata

KEDA_API_VERSION: Final = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND: Final = "ScaledObject"
# How often KEDA's operator asks Prometheus whether a trigger is active: the wake-up's delay is
# this plus a scrape interval or two.
POLLING_INTERVAL_SECONDS = 5
# `demand` as a replica target: unreachable, so that trigger only ever asks for one pod.
UNREACHABLE_TARGET = "1000000"
# Requests finished within this window count as demand (a rate needs two samples in it).
RECENT_WINDOW = "1m"
# Counted per attempt by vllm-router 0.1.17 when no engine is there to take a request.
NO_ENGINE_ERROR = "no_available_workers"
# The router hop's gauge of requests it holds, for room or for an adapter (routerhop.metrics).
HOP_HELD_METRIC = "llmfleet_router_hop_requests_held"


def keda_hpa_name(owner_name: str) -> str:
    """The HPA KEDA creates for the ScaledObject (KEDA's getHPAName)."""
    return f"keda-hpa-{owner_name}"


def _selector(owner: Owner) -> str:
    # The labels Prometheus gives every LLMFleet pod it scrapes (the chart's PodMonitors, the
    # relabelling in docs/autoscaling.md).
    return f'namespace="{owner.namespace}",llmdeployment="{owner.name}"'


def held_query(owner: Owner) -> str:
    # No router (spec.router.enabled false), or not scraped yet: 0, not an empty result.
    return f"(sum({HOP_HELD_METRIC}{{{_selector(owner)}}}) or vector(0))"


def queue_query(owner: Owner) -> str:
    waiting = f"sum(avg_over_time(vllm:num_requests_waiting{{{_selector(owner)}}}[30s]))"
    return f"({waiting} or vector(0)) + {held_query(owner)}"


def demand_query(owner: Owner) -> str:
    """The router hop holds a request until an engine has room for it, so vllm-router never sees
    it while none is Ready: the hop's held requests are the wake-up."""
    sel = _selector(owner)
    parts = (
        f'sum(rate(vllm_router_request_errors_total{{{sel},error_type="{NO_ENGINE_ERROR}"}}'
        f"[{RECENT_WINDOW}]))",
        f"sum(vllm:num_requests_running{{{sel}}})",
        f"sum(vllm:num_requests_waiting{{{sel}}})",
        f"sum(rate(vllm:request_success_total{{{sel}}}[{RECENT_WINDOW}]))",
        f"sum({HOP_HELD_METRIC}{{{sel}}})",
    )
    # A part with no series (no engine at zero, no router error yet) is 0, not an empty result
    # that would make the whole sum empty.
    return " + ".join(f"({p} or vector(0))" for p in parts)


def render_scaled_object(
    owner: Owner, spec: LLMDeploymentSpec, plan: Plan, prometheus_url: str
) -> dict[str, Any]:
    autoscaling = spec.autoscaling

    def trigger(name: str, query: str, threshold: str) -> dict[str, Any]:
        return {
            "type": "prometheus",
            "name": name,
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": query,
                "threshold": threshold,
                # Active (wakes from zero, holds off the removal of the last pod) above 0.
                "activationThreshold": "0",
                "ignoreNullValues": "true",
            },
        }

    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": SCALED_OBJECT_KIND,
        "metadata": metadata(owner, owner.name),
        "spec": {
            "scaleTargetRef": scale_target_ref(owner, plan),
            "minReplicaCount": plan.min_replicas,
            "maxReplicaCount": plan.max_replicas,
            "pollingInterval": POLLING_INTERVAL_SECONDS,
            "cooldownPeriod": autoscaling.idle_window_seconds,
            # A new LLMDeployment serves for one idle window before it may go to zero, instead
            # of at once (KEDA's default 0), so whoever just applied it can try it.
            "initialCooldownPeriod": autoscaling.idle_window_seconds,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior(spec)}},
            "triggers": [
                trigger("queue", queue_query(owner), str(plan.target_queue_depth)),
                trigger("demand", demand_query(owner), UNREACHABLE_TARGET),
            ],
        },
    }
