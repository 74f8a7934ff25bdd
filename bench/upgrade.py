"""Upgrade under load: the previous release (chart, CRDs, operator) to this tree while a client
sends requests through an LLMDeployment's router to a real CPU vLLM engine
(dev/localcluster/upgrade.py, on a cluster of its own): requests that failed (goal 0), and engine
pods that restarted or were replaced (goal 0 for a release whose CHANGELOG.md line says `Engine
pods: not restarted`; otherwise each replaced once, by a rollout)."""

from __future__ import annotations

from localcluster.upgrade import own_cluster, upgrade


def run() -> dict[str, float]:
    with own_cluster() as cluster:
        outcome = upgrade(cluster, settle_s=30.0)
    restarted = sum(
        1 for name, pod in outcome.pods_before.items() if outcome.pods_after.get(name) != pod
    )
    return {
        "upgrade_failed_requests": float(len(outcome.failed)),
        "upgrade_requests": float(outcome.requests),
        "upgrade_engine_restarts": float(restarted),
    }
