"""The autoscaler's bounds and target a plan carries: min/max replicas and the queue depth."""

from __future__ import annotations

import math

from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.planner.errors import PlanError

# HPA target: a request that queues behind this many others waits about a quarter of one
# request's service time, as every finishing sequence admits one waiting request.
QUEUE_DEPTH_PER_CONCURRENT_SEQUENCE = 0.25


def autoscaling_bounds(spec: LLMDeploymentSpec, replicas: int) -> tuple[int, int]:
    autoscaling = spec.autoscaling
    if not autoscaling.enabled:
        return replicas, replicas
    minimum = replicas if autoscaling.min_replicas is None else autoscaling.min_replicas
    maximum = autoscaling.max_replicas or 2 * (minimum or replicas)
    if maximum < minimum:
        raise PlanError(
            "spec.autoscaling.maxReplicas",
            f"{maximum} is below minReplicas {minimum} (the planned replica count when "
            "minReplicas is unset); set maxReplicas to at least that",
        )
    return minimum, maximum


def target_queue_depth(spec: LLMDeploymentSpec, max_num_seqs: int) -> int:
    given = spec.autoscaling.target_queue_depth
    if given is not None:
        return given
    return max(1, math.ceil(max_num_seqs * QUEUE_DEPTH_PER_CONCURRENT_SEQUENCE))
