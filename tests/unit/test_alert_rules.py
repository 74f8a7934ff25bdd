"""The alert rules of the chart (files/prometheus-rules.yaml): promtool accepts them, each alert
is documented, and promtool's rule unit tests (data/promtool/*.yaml, real Prometheus rule
evaluation over synthetic series) show each alert firing on its situation and staying silent on
healthy series."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboards import promql

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "charts" / "llmfleet" / "files" / "prometheus-rules.yaml"
RUNBOOKS = REPO / "docs" / "runbooks.md"
PROMTOOL_TESTS = sorted((Path(__file__).parent / "data" / "promtool").glob("*.yaml"))
RUNBOOK_BASE = "https://github.com/llmfleet/llmfleet/blob/main/docs/runbooks.md#"

# Every alert the issue asks for, with its severity.
EXPECTED_ALERTS = {
    "LLMFleetQueueDepthAtMaxReplicas": "warning",
    "LLMFleetEnginePodsPendingForGPUs": "warning",
    "LLMFleetKVCacheNearlyFull": "warning",
    "LLMFleetHighPreemptionRate": "warning",
    "LLMFleetEnginePodsNotReady": "warning",
    "LLMFleetTTFTAboveSLO": "critical",
    "LLMFleetReconcileErrors": "warning",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed; run `make debian-deps`")
    return path


@cache
def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for r in rules() if "alert" in r}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_the_expected_alerts_exist() -> None:
    assert {name: a["labels"]["severity"] for name, a in alerts().items()} == EXPECTED_ALERTS


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_alert_is_documented(name: str) -> None:
    alert = alerts()[name]
    annotations = alert["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert alert.get("for"), "every alert waits before firing"
    # Every alert names the LLMDeployment it is about.
    for key in ("summary", "description"):
        assert "{{ $labels.namespace }}/{{ $labels.llmdeployment }}" in annotations[key], key
    url = annotations["runbook_url"]
    assert url == RUNBOOK_BASE + name.lower()
    headings = [
        line.lstrip("#").strip()
        for line in RUNBOOKS.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    ]
    assert url.split("#", 1)[1] in {github_anchor(h) for h in headings}, (
        f"docs/runbooks.md has no section for {name}"
    )


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_alert_keeps_the_llmdeployment_label(name: str) -> None:
    """The aggregation keeps namespace and llmdeployment, so the annotations can name them."""
    expr = alerts()[name]["expr"]
    assert re.search(r"by \(namespace, llmdeployment[,)]", expr), expr


@pytest.mark.parametrize("deprecated", promql.DEPRECATED_METRICS)
def test_no_deprecated_vllm_metric(deprecated: str) -> None:
    assert deprecated not in RULES.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", PROMTOOL_TESTS, ids=lambda p: p.stem)
def test_promtool_rule_unit_tests(path: Path) -> None:
    result = subprocess.run(
        [promtool(), "test", "rules", path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _alert_cases() -> list[tuple[str, bool]]:
    """(alertname, fires) of every alert_rule_test in the promtool tests."""
    cases = []
    for path in PROMTOOL_TESTS:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert [(path.parent / f).resolve() for f in doc["rule_files"]] == [RULES], (
            f"{path.name} must test the chart's rule file"
        )
        for test in doc["tests"]:
            for case in test.get("alert_rule_test") or []:
                cases.append((case["alertname"], bool(case.get("exp_alerts"))))
    return cases


@pytest.mark.parametrize("name", sorted(EXPECTED_ALERTS))
def test_every_alert_is_shown_firing_and_silent(name: str) -> None:
    cases = _alert_cases()
    assert (name, True) in cases, f"no promtool test shows {name} firing"
    assert (name, False) in cases, f"no promtool test shows {name} silent on a healthy series"
