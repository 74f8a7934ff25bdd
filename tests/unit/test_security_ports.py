"""docs/security.md's "Every port" table against what LLMFleet renders: every containerPort of
every pod rendered for every example (LLMDeployments and LLMBatchJobs) and of the chart's
operator pod is listed there, and every port listed is rendered. A port added without saying who
may call it, and how that is enforced, fails here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from chartrender import operator_container, render

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.models.network_policy import parse_engine_network_policy
from llmfleet.planner import plan
from llmfleet.render import Owner, render_fleet
from llmfleet.render.batchjob import BatchOwner, render_batch_job
from llmfleet.settings import OperatorSettings

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
POLICY = parse_engine_network_policy('{"operator": [{"podSelector": {}}]}')

Port = tuple[str, str, int]  # container, port name, number


def documented() -> set[Port]:
    text = (REPO / "docs" / "security.md").read_text()
    section = text.split("\n## Every port\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    out = set()
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        container = re.fullmatch(r"`([^`]+)`", cells[1])
        port = re.fullmatch(r"`([^`]+)` (\d+)", cells[2])
        assert container, f"docs/security.md: a row without a `container`: {row}"
        assert port, f"docs/security.md: a row without a `port` number: {row}"
        out.add((container.group(1), port.group(1), int(port.group(2))))
    return out


def pod_specs(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        if isinstance(obj.get("containers"), list):
            yield obj
        for value in obj.values():
            yield from pod_specs(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from pod_specs(value)


def ports(objects: list[dict[str, Any]]) -> set[Port]:
    return {
        (c["name"], p["name"], p["containerPort"])
        for o in objects
        for spec in pod_specs(o)
        for c in spec["containers"]
        for p in c.get("ports") or []
    }


def rendered_for(path: Path) -> list[dict[str, Any]]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    if doc["kind"] == "LLMBatchJob":
        batch = LLMBatchJobSpec.model_validate(doc["spec"])
        owner = BatchOwner(name="job", namespace="team", uid="u-1")
        job = render_batch_job(
            owner,
            batch,
            plan(batch.deployment_spec()),
            OperatorSettings(spare_priority_class="spare").fleet,
        )
        return [job]
    spec = LLMDeploymentSpec.model_validate(doc["spec"])
    return render_fleet(
        Owner("llmd", "team", "u-2"),
        spec,
        plan(spec),
        OperatorSettings(engine_network_policy=POLICY).fleet,
    ).objects()


def test_every_rendered_port_is_documented_and_every_documented_port_rendered() -> None:
    rendered: dict[Port, list[str]] = {}
    for path in EXAMPLES:
        for port in ports(rendered_for(path)):
            rendered.setdefault(port, []).append(path.name)
    for port in ports([{"containers": [operator_container(render())]}]):
        rendered.setdefault(port, []).append("the chart's operator")
    doc = documented()

    missing = {p: where for p, where in rendered.items() if p not in doc}
    assert not missing, f"rendered, not in docs/security.md's port table: {missing}"
    assert doc <= rendered.keys(), f"in the table, rendered nowhere: {doc - rendered.keys()}"


def test_the_table_lists_the_fetcher_and_the_engine() -> None:
    # The test above must be able to fail: the table is read, not skipped.
    assert {("adapter-fetcher", "fetcher", 8081), ("vllm", "http", 8000)} <= documented()
    assert {("router-hop", "http", 8000), ("router-hop", "metrics", 29000)} <= documented()
