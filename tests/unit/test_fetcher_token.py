"""The adapter fetchers' token (reconcile/llmdeployment/fetcher_token.py): one per LLMDeployment,
the same in every operator replica and after a restart (derived from the key Secret in the
operator's namespace, created by whichever replica comes first), written once into a Secret the
LLMDeployment owns, and never read back from the namespaces the operator serves."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from llmfleet.reconcile.llmdeployment.fetcher_token import FetcherTokens, KeySecret
from llmfleet.reconcile.llmdeployment.fetching import HttpFetcherApi
from llmfleet.render import Owner

WHERE = KeySecret("llmfleet-system", "fleet-llmfleet-fetcher-key")
OWNER = Owner(name="chat", namespace="team-a", uid="uid-1")


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


class FakeCore:
    """Secrets by (namespace, name); records every call."""

    def __init__(self) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> _Answer:
        self.calls.append(("get", namespace, name))
        if (namespace, name) not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        return _Answer(self.secrets[namespace, name])

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any], **_: Any) -> _Answer:
        name = body["metadata"]["name"]
        self.calls.append(("create", namespace, name))
        if (namespace, name) in self.secrets:
            raise ApiException(status=409, reason="Conflict")
        self.secrets[namespace, name] = body
        return _Answer(body)


def test_every_replica_derives_the_same_token_and_each_deployment_its_own() -> None:
    core = FakeCore()
    first, second = FetcherTokens(core, WHERE), FetcherTokens(core, WHERE)  # type: ignore[arg-type]

    token = first.token("team-a", "chat")

    assert second.token("team-a", "chat") == token
    assert first.token("team-a", "sql") != token
    assert first.token("team-b", "chat") != token
    assert [c for c in core.calls if c[0] == "create"] == [("create", *_at(WHERE))]
    assert token.value not in repr(token)


def test_the_secret_is_created_once_owned_by_the_deployment_and_holds_the_token() -> None:
    core = FakeCore()
    tokens = FetcherTokens(core, WHERE)  # type: ignore[arg-type]

    tokens.ensure_secret(OWNER)
    tokens.ensure_secret(OWNER)  # no second call: known to exist

    secret = core.secrets["team-a", "chat-fetcher"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    written = base64.b64decode(secret["data"]["token"]).decode()
    assert written == tokens.token("team-a", "chat").value
    assert core.calls.count(("create", "team-a", "chat-fetcher")) == 1
    # Never read back where the LLMDeployment lives: the operator may not read Secrets there.
    assert not [c for c in core.calls if c[0] == "get" and c[1] == "team-a"]


def test_a_restarted_operator_keeps_the_secret_that_exists() -> None:
    core = FakeCore()
    FetcherTokens(core, WHERE).ensure_secret(OWNER)  # type: ignore[arg-type]
    before = dict(core.secrets["team-a", "chat-fetcher"])

    FetcherTokens(core, WHERE).ensure_secret(OWNER)  # type: ignore[arg-type]

    assert core.secrets["team-a", "chat-fetcher"] == before


def test_a_refused_create_names_the_secret_without_its_body() -> None:
    core = FakeCore()

    def forbidden(namespace: str, body: dict[str, Any], **_: Any) -> _Answer:
        raise ApiException(status=403, reason="Forbidden")

    core.create_namespaced_secret = forbidden  # type: ignore[method-assign]
    tokens = FetcherTokens(core, None)  # type: ignore[arg-type]

    with pytest.raises(ApiException) as refused:
        tokens.ensure_secret(OWNER)

    assert refused.value.status == 403
    assert "team-a/chat-fetcher" in str(refused.value.reason)
    assert refused.value.body is None


def _at(where: KeySecret) -> tuple[str, str]:
    return where.namespace, where.name


@pytest.mark.parametrize(
    ("status", "text", "says"),
    [
        pytest.param(
            401, '{"error": {"message": "x"}}', "refused the operator's token", id="token-refused"
        ),
        pytest.param(
            507,
            '{"error": {"message": "keeps at most 4 fetched adapters"}}',
            "keeps at most 4 fetched adapters",
            id="cap-reached",
        ),
    ],
)
def test_the_operator_sends_the_token_and_reports_the_fetchers_refusal(
    monkeypatch: pytest.MonkeyPatch, status: int, text: str, says: str
) -> None:
    sent: list[dict[str, str] | None] = []

    def call(url: str, body: Any, timeout: float, headers: Any = None) -> tuple[int, str]:
        sent.append(headers)
        return status, text

    monkeypatch.setattr("llmfleet.reconcile.llmdeployment.fetching.call", call)
    token = FetcherTokens(FakeCore(), WHERE).token("team-a", "chat")  # type: ignore[arg-type]

    why = HttpFetcherApi().fetch("10.0.0.7", token, "s3://team/sql", None)

    assert sent == [{"Authorization": f"Bearer {token.value}"}]
    assert why is not None
    assert says in why
