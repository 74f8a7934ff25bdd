"""An idle resync writes nothing: every object the operator renders still matches itself once the
API server has stored it (reconcile.machinery.drift). The API server drops a field whose value is
empty (Go's `omitempty`: "" and [] among them), so a rendered empty value reads as drift on every
resync and the object is rewritten forever (the e2e test_idle_resync_makes_zero_api_writes)."""

from __future__ import annotations

from typing import Any

import pytest
from examplepods import EXAMPLES

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.reconcile.machinery.drift import needs_apply, with_hash
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

OWNER = Owner(name="chat", namespace="team-a", uid="1234")
FLEET = OperatorSettings(keda_prometheus_url="http://prometheus.monitoring.svc:9090").fleet
H100 = {"count": 2, "memoryGiB": 80, "perNode": 8, "product": "NVIDIA-H100-80GB-HBM3"}
BASE = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "gpus": H100}


def as_stored(value: Any) -> Any:
    """The object as the API server returns it: empty strings and lists gone."""
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items() if v not in ("", [])}
    if isinstance(value, list):
        return [as_stored(v) for v in value]
    return value


SPECS = {
    # The router (and its hop) without adapters: the hop's adapter list is empty.
    "router-without-adapters": BASE,
    "router-with-adapters": {
        **BASE,
        "engine": {"lora": {"maxAdapters": 2, "maxRank": 16}},
        "adapters": [{"name": "sql", "source": "org/sql"}],
    },
    "scales-to-zero": {**BASE, "autoscaling": {"minReplicas": 0}},
    **{name: doc["spec"] for name, doc in EXAMPLES.items()},
}


@pytest.mark.parametrize("body", SPECS.values(), ids=SPECS.keys())
def test_every_rendered_object_matches_its_stored_self_so_an_idle_resync_writes_nothing(
    body: dict[str, Any],
) -> None:
    s = LLMDeploymentSpec.model_validate(body)
    for obj in render_fleet(OWNER, s, plan(s), FLEET).objects():
        desired = with_hash(obj)
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert not needs_apply(desired, as_stored(desired)), where
