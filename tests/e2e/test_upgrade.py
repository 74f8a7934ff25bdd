"""Upgrading LLMFleet keeps serving: from the previous release (its chart, CRDs and operator, as
extracted from git) to this tree's, with `helm upgrade` and a rolling restart of the operator,
while a client sends requests through an LLMDeployment's router to a real CPU vLLM engine. No
request fails; engine pods (the real one and a kwok one) are not restarted, unless CHANGELOG.md
announces it for this release (`Engine pods: restarted (<why>) in <example>.yaml, ...`), and then
each is replaced once, by a rollout, under load; and the CRDs come with the chart: a field only
the new schema knows is pruned before the upgrade and kept after it."""

from __future__ import annotations

import pytest
from localcluster.supervisor import REPO
from localcluster.upgrade import own_cluster, upgrade

from llmfleet import __version__

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
    if outcome.pods_after != outcome.pods_before:
        assert restarts_announced(), "engine pods restarted, and CHANGELOG.md says they are not"
        # Replaced by a rollout (new pods, none restarted in place), as many as before.
        assert len(outcome.pods_after) == len(outcome.pods_before)
        before = {uid for uid, _ in outcome.pods_before.values()}
        assert not before & {uid for uid, _ in outcome.pods_after.values()}
        assert all(restarts == 0 for _, restarts in outcome.pods_after.values())
    assert outcome.new_field_before is None  # 0.1.0's schema pruned it
    assert outcome.new_field_after == {"team": "search"}
    assert outcome.versions_after == {"0.2.0"}


def restarts_announced() -> bool:
    """Whether CHANGELOG.md's section of this release says `Engine pods: restarted (...)`
    (tests/unit/test_release.py holds it to one such line)."""
    text = (REPO / "CHANGELOG.md").read_text()
    section = text.split(f"## [{__version__}]", 1)[1].split("\n## [", 1)[0]
    return "\nEngine pods: restarted (" in section
