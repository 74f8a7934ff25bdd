"""Upgrading LLMFleet keeps serving: from the previous release (its chart, CRDs and operator, as
extracted from git) to this tree's, with `helm upgrade` and a rolling restart of the operator,
while a client sends requests through an LLMDeployment's router to a real CPU vLLM engine. No
request fails, no engine pod restarts (the real one and a kwok one), and the CRDs come with the
chart: a field only the new schema knows is pruned before the upgrade and kept after it."""

from __future__ import annotations

import pytest
from localcluster.upgrade import own_cluster, upgrade

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.lab("a lab cluster of its own (the node runner serves through the upgrade)"),
]


def test_helm_upgrade_from_the_previous_release_keeps_serving_and_upgrades_the_crds() -> None:
    with own_cluster() as cluster:
        outcome = upgrade(cluster)
    print(f"{outcome.requests} requests through the upgrade, {len(outcome.failed)} failed")
    assert outcome.requests > 10
    assert outcome.failed == []
    assert len(outcome.pods_before) == 2
    assert outcome.pods_after == outcome.pods_before  # same pods (UID), no restart
    assert outcome.new_field_before is None  # 0.1.0's schema pruned it
    assert outcome.new_field_after == {"team": "search"}
    assert outcome.versions_after == {"0.2.0"}
