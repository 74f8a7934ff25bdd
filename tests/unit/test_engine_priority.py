"""The online PriorityClass on engines (the operator's --engine-priority-class, the chart's
priorityClasses.online.assignToEngines): every engine pod template of every example runs at it
when it is given, and none changes when it is not (a new priorityClassName restarts every
engine, which tests/unit/test_upgrade_pod_templates.py guards against)."""

from __future__ import annotations

from typing import Any

import pytest
from examplepods import EXAMPLES, engine_pod_templates

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.settings import OperatorSettings

ONLINE = "llmfleet-online"


def templates(doc: dict[str, Any], **kw: Any) -> dict[str, dict[str, Any]]:
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    owner = Owner(doc["metadata"]["name"], "team-a", "uid-1")
    return engine_pod_templates(
        render_fleet(owner, spec, plan(spec), OperatorSettings(**kw).fleet).objects()
    )


@pytest.mark.parametrize("example", sorted(EXAMPLES), ids=str)
def test_engines_run_at_the_online_class_only_when_the_operator_is_given_one(
    example: str,
) -> None:
    plain = templates(EXAMPLES[example])
    online = templates(EXAMPLES[example], engine_priority_class=ONLINE)
    assert plain  # a Deployment's template, or a LeaderWorkerSet's leader and worker
    assert online.keys() == plain.keys()
    for where, template in online.items():
        assert template["spec"].pop("priorityClassName") == ONLINE, where
        assert template == plain[where], where
        assert "priorityClassName" not in plain[where]["spec"], where
