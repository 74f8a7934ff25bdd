"""The chart's huggingFace values, where the operator reads config.json, and the one Secret grant
it takes only when asked to (rbac.readSecrets, or its older name huggingFace.readTokenSecrets)."""

from __future__ import annotations

import pytest
from chartrbac import EXPECTED_RULES, RBAC_KINDS, beside_the_operator_rules, granted
from chartrender import CHART, of_kind, operator_container, render, run_helm

from llmfleet.catalog.hub import DEFAULT_ENDPOINT
from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.reconcile.machinery.secrets import READ_SECRETS_VALUE

SECRETS = ("", "secrets")


def test_the_operator_reads_config_json_from_the_hub_unless_an_endpoint_is_given() -> None:
    default = operator_container(render())["args"]
    mirrored = operator_container(render("huggingFace.endpoint=http://hub.internal:8080"))["args"]

    assert not [a for a in default if a.startswith("--hf-endpoint")]
    assert "--hf-endpoint=http://hub.internal:8080" in mirrored
    run = ["run", "--leader-election-namespace=x"]
    assert settings_from_args(build_parser().parse_args(run), {}).hf_endpoint == DEFAULT_ENDPOINT
    parsed = build_parser().parse_args([*run, *[a for a in mirrored if a.startswith("--hf")]])
    assert settings_from_args(parsed, {}).hf_endpoint == "http://hub.internal:8080"


@pytest.mark.parametrize(
    "grant",
    [
        pytest.param("rbac.readSecrets=true", id="read-secrets"),
        pytest.param("huggingFace.readTokenSecrets=true", id="older-name"),
    ],
)
@pytest.mark.parametrize(
    ("set_args", "scope"),
    [
        pytest.param((), "ClusterRole", id="all-namespaces"),
        pytest.param(("watchNamespaces={team-a,team-b}",), "Role", id="listed-namespaces"),
    ],
)
def test_secrets_are_read_by_name_only_when_the_grant_is_asked_for(
    set_args: tuple[str, ...], scope: str, grant: str
) -> None:
    def rules(*extra: str) -> list[dict[tuple[str, str], set[str]]]:
        docs = [d for d in render(*set_args, *extra) if not beside_the_operator_rules(d)]
        roles = of_kind(docs, *RBAC_KINDS)
        assert {r["kind"] for r in roles} == {scope}
        return [granted(r) for r in roles]

    # Without the grant: create (the fetchers' token Secrets), never get.
    assert all(r[SECRETS] == {"create"} for r in rules())
    enabled = rules(grant)
    assert enabled == [{**EXPECTED_RULES, SECRETS: {"create", "get"}}] * len(enabled)


def test_the_value_the_operator_names_when_it_may_not_read_a_secret_grants_it() -> None:
    docs = [d for d in render(f"{READ_SECRETS_VALUE}=true") if not beside_the_operator_rules(d)]
    roles = of_kind(docs, *RBAC_KINDS)

    assert roles
    assert all("get" in granted(r).get(SECRETS, set()) for r in roles)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("huggingFace.endpoint=hub.internal", id="endpoint-without-scheme"),
        pytest.param("huggingFace.readTokenSecret=true", id="typo-in-the-key"),
        pytest.param("rbac.readSecret=true", id="typo-in-the-grant"),
        pytest.param("rbac.readSecrets=yes", id="grant-not-a-bool"),
    ],
)
def test_bad_huggingface_and_grant_values_are_refused_naming_them(value: str) -> None:
    result = run_helm("template", "fleet", str(CHART), "--set-string", value)

    assert result.returncode != 0
    assert value.split(".", 1)[0] in result.stderr, result.stderr
