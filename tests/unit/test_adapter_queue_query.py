"""The queue the autoscalers read, evaluated by Prometheus's own engine (promtool's rule unit
tests): the prometheus-adapter rule the HPAs read (charts/llmfleet/files/prometheus-adapter-
rules.yaml) and KEDA's `queue` trigger (render.scaledobject). Each engine pod's value is its own
queue plus an even share of the requests the router hop holds, and a missing router series leaves
exactly the engines' queue: never an empty result that would blind the autoscaler."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from localcluster.metricsstack.adapter_rule import queue_metric_query

from llmfleet.render import Owner
from llmfleet.render.scaledobject import queue_query

WAITING = "vllm:num_requests_waiting"
HELD = "llmfleet_router_hop_requests_held"
NS = "ml"
ENGINES = ("chat-tp1-a", "chat-tp1-b")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed; run `make debian-deps`")
    return path


def engine(pod: str, value: float, llmd: str = "chat", ns: str = NS, extra: str = "") -> str:
    return f'{WAITING}{{namespace="{ns}",pod="{pod}",llmdeployment="{llmd}"{extra}}}={value}'


def held(pod: str, value: float, llmd: str = "chat", ns: str = NS) -> str:
    return f'{HELD}{{namespace="{ns}",pod="{pod}",llmdeployment="{llmd}"}}={value}'


def series(specs: tuple[str, ...]) -> list[dict[str, str]]:
    """`name{labels}=value` -> promtool input series, constant for the whole test."""
    out = []
    for s in specs:
        name, value = s.rsplit("=", 1)
        out.append({"series": name, "values": f"{value}x30"})
    return out


def run_promtool(
    tmp_path: Path, inputs: tuple[str, ...], expr: str, exp: list[dict[str, object]]
) -> None:
    test = {
        "rule_files": [],
        "evaluation_interval": "5s",
        "tests": [
            {
                "interval": "5s",
                "input_series": series(inputs),
                "promql_expr_test": [{"expr": expr, "eval_time": "1m", "exp_samples": exp}],
            }
        ],
    }
    path = tmp_path / "query_test.yaml"
    path.write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@dataclass(frozen=True)
class Case:
    inputs: tuple[str, ...]
    per_pod: dict[str, float]


ADAPTER_CASES = {
    # The demo on kwok, or a cluster that does not scrape its routers: today's metric, exactly.
    "no-router-series-is-the-engines-own-queue": Case(
        (engine(ENGINES[0], 1), engine(ENGINES[1], 5)), {ENGINES[0]: 1, ENGINES[1]: 5}
    ),
    # 6 held over two routers, shared by two engines: the pods add up to 1 + 5 + 6.
    "held-requests-are-shared-by-the-engines": Case(
        (engine(ENGINES[0], 1), engine(ENGINES[1], 5), held("r1", 2), held("r2", 4)),
        {ENGINES[0]: 4, ENGINES[1]: 8},
    ),
    "nothing-held-is-the-engines-own-queue": Case(
        (engine(ENGINES[0], 2), engine(ENGINES[1], 0), held("r1", 0)),
        {ENGINES[0]: 2, ENGINES[1]: 0},
    ),
    # A data-parallel engine reports one series per engine core: still one pod's share.
    "a-pod-with-two-queue-series-counts-once": Case(
        (
            engine(ENGINES[0], 1, extra=',engine="0"'),
            engine(ENGINES[0], 2, extra=',engine="1"'),
            engine(ENGINES[1], 0),
            held("r1", 4),
        ),
        {ENGINES[0]: 5, ENGINES[1]: 2},
    ),
    # Held requests of another LLMDeployment, or of one of the same name elsewhere, are not ours.
    "other-llmdeployments-held-requests-do-not-count": Case(
        (
            engine(ENGINES[0], 1),
            engine(ENGINES[1], 1),
            held("r1", 10, llmd="other"),
            held("r2", 10, ns="elsewhere"),
        ),
        {ENGINES[0]: 1, ENGINES[1]: 1},
    ),
}


@pytest.mark.parametrize("case", ADAPTER_CASES.values(), ids=ADAPTER_CASES.keys())
def test_each_engine_pods_queue_is_its_own_plus_its_share_of_the_held_requests(
    case: Case, tmp_path: Path
) -> None:
    expected = [{"labels": f'{{pod="{p}"}}', "value": v} for p, v in case.per_pod.items()]
    run_promtool(tmp_path, case.inputs, queue_metric_query(NS, ENGINES), expected)


KEDA_CASES = {
    "no-router-series-is-the-engines-queue": Case((engine(ENGINES[0], 3),), {"": 3}),
    "held-requests-add-to-the-queue": Case((engine(ENGINES[0], 3), held("r1", 4)), {"": 7}),
    # Scaled to zero: no engine series at all; what the routers hold is the whole queue.
    "at-zero-the-held-requests-are-the-queue": Case((held("r1", 4),), {"": 4}),
    # Nothing scraped at all: 0, not an empty result that KEDA would read as an error.
    "nothing-scraped-is-zero": Case((engine(ENGINES[0], 9, llmd="other"),), {"": 0}),
}


@pytest.mark.parametrize("case", KEDA_CASES.values(), ids=KEDA_CASES.keys())
def test_kedas_queue_trigger_counts_held_requests_and_is_never_empty(
    case: Case, tmp_path: Path
) -> None:
    expr = queue_query(Owner(name="chat", namespace=NS, uid="1"))
    expected = [{"labels": "{}", "value": v} for v in case.per_pod.values()]
    run_promtool(tmp_path, case.inputs, expr, expected)
