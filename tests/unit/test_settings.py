"""The operator's settings come from one definition (llmfleet/settings.py): `llmfleet run` takes
each as a flag, else its environment variable, else its default; a bad value stops it naming
the flag or variable and what it takes; docs/operator.md lists them as the definition says; and
the chart passes every one it sets as a flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chartrender import operator_container, render

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.models.network_policy import EngineNetworkPolicy
from llmfleet.settings import OperatorSettings, settings, with_table

REPO = Path(__file__).resolve().parents[2]
OPERATOR_DOC = REPO / "docs" / "operator.md"


def given(*args: str, **environ: str) -> OperatorSettings:
    return settings_from_args(build_parser().parse_args(["run", *args]), environ)


# (setting, its flag's argument, its variable's value, the value each gives)
SOURCES: dict[str, tuple[str, str, Any, str, Any]] = {
    "engine-image": (
        "default_engine_image",
        "--default-engine-image=flag/vllm:1",
        "env/vllm:1",
        "flag/vllm:1",
        "env/vllm:1",
    ),
    "port": ("metrics_port", "--metrics-port=9100", "9200", 9100, 9200),
    "resync": ("resync_seconds", "--resync-seconds=5", "7.5", 5.0, 7.5),
    "switch": ("leader_election", "--leader-election", "false", True, False),
    "namespaces": ("namespaces", "-n=a", "b,c", ("a",), ("b", "c")),
    "priority-class": (
        "spare_priority_class",
        "--spare-priority-class=from-flag",
        "from-env",
        "from-flag",
        "from-env",
    ),
    "network-policy": (
        "engine_network_policy",
        '--engine-network-policy={"clients": [{"podSelector": {}}]}',
        '{"scrapers": [{"podSelector": {}}]}',
        EngineNetworkPolicy(clients=({"podSelector": {}},)),
        EngineNetworkPolicy(scrapers=({"podSelector": {}},)),
    ),
}


def env_of(field: str) -> str:
    (variable,) = [how.env for name, how, _ in settings() if name == field]
    return variable


@pytest.mark.parametrize(
    ("field", "flag", "env_value", "from_flag", "from_env"), SOURCES.values(), ids=SOURCES.keys()
)
def test_a_flag_wins_over_its_variable_and_the_variable_over_the_default(
    field: str, flag: str, env_value: str, from_flag: Any, from_env: Any
) -> None:
    variable = env_of(field)
    default = getattr(OperatorSettings(), field)
    assert from_env != default
    assert from_flag != from_env
    assert getattr(given(), field) == default
    assert getattr(given(**{variable: env_value}), field) == from_env
    assert getattr(given(flag, **{variable: env_value}), field) == from_flag
    # An empty variable is unset.
    assert getattr(given(**{variable: ""}), field) == default


def test_settings_left_unset_are_the_definitions_defaults() -> None:
    assert given("--leader-election-namespace=ops") == OperatorSettings(
        leader_election_namespace="ops"
    )


# (variable, value, what the message names)
BAD_VARIABLES = {
    "port": ("LLMFLEET_METRICS_PORT", "ninety", ["--metrics-port", "not a number"]),
    "switch": ("LLMFLEET_LEADER_ELECTION", "maybe", ["--leader-election", "true, 1, yes, on"]),
    "log-level": ("LLMFLEET_LOG_LEVEL", "LOUD", ["--log-level", "DEBUG, INFO, WARNING, ERROR"]),
    "priority-class": (
        "LLMFLEET_ENGINE_PRIORITY_CLASS",
        "Not_A_Name",
        ["--engine-priority-class", "lower-case letters"],
    ),
    "url": ("LLMFLEET_KEDA_PROMETHEUS_URL", "prometheus:9090", ["http:// or https://"]),
    "network-policy": (
        "LLMFLEET_ENGINE_NETWORK_POLICY",
        '{"scraper": []}',
        ["--engine-network-policy", "NetworkPolicyPeers"],
    ),
}


@pytest.mark.parametrize(
    ("variable", "value", "named"), BAD_VARIABLES.values(), ids=BAD_VARIABLES.keys()
)
def test_a_bad_variable_stops_the_operator_naming_it_and_what_it_takes(
    variable: str, value: str, named: list[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        given(**{variable: value})
    message = str(stopped.value.code)
    assert f"env {variable}" in message
    for part in named:
        assert part in message


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--metrics-port=ninety", "not a number"),
        ("--log-level=LOUD", "DEBUG, INFO, WARNING, ERROR"),
        ("--spare-priority-class=Not_A_Name", "not a PriorityClass name"),
    ],
)
def test_a_bad_flag_stops_the_operator_naming_it(
    flag: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        given(flag)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert flag.split("=", maxsplit=1)[0] in err
    assert named in err


def test_every_setting_has_a_flag_a_variable_and_help_of_its_own() -> None:
    defined = settings()
    flags = [how.flag for _, how, _ in defined]
    variables = [how.env for _, how, _ in defined]
    assert len(set(flags)) == len(flags)
    assert len(set(variables)) == len(variables)
    assert all(how.help for _, how, _ in defined)
    assert {name for name, _, _ in defined} == set(OperatorSettings.__dataclass_fields__)


def test_help_shows_each_settings_variable_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for _, how, default in settings():
        assert how.flag in text
        assert f"env {how.env}; default: {how.show(default)}" in text


def test_the_docs_table_is_the_definitions() -> None:
    page = OPERATOR_DOC.read_text()
    assert with_table(page) == page, (
        "docs/operator.md's settings table is stale: make settings-table"
    )


def test_the_chart_passes_every_setting_as_a_flag_and_none_as_a_variable() -> None:
    container = operator_container(render("engine.networkPolicy.enabled=true"))
    variables = {how.env for _, how, _ in settings()}
    assert [e["name"] for e in container["env"] if e["name"] in variables] == []
    flags = {how.flag for _, how, _ in settings()}
    passed = [arg.split("=", 1)[0] for arg in container["args"]]
    assert set(passed) <= flags
    assert {"--default-engine-image", "--adapter-fetcher-image"} <= set(passed)
