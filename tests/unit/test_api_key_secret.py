"""spec.engine.apiKeySecretRef's key, as the operator reads it for the engines' LoRA API: from the
Secret (a stand-in API server on 127.0.0.1), what AdaptersReady and the Warning Event say when it
cannot be read, and that the key itself appears nowhere a user or a log could read it."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import pytest
from hubstub import Answer, HubStub, hub_stub
from kubernetes import client as k8s

from llmfleet.models.model_spec import ModelSpec
from llmfleet.models.refs import SecretKeyRef
from llmfleet.models.status import Condition
from llmfleet.reconcile.llmdeployment.adapter_status import key_unreadable, newly_keyless
from llmfleet.reconcile.llmdeployment.adapters import Wanted
from llmfleet.reconcile.machinery.causes import Blocker
from llmfleet.reconcile.machinery.conditions import TRUE, condition
from llmfleet.reconcile.machinery.modelconfig import ModelConfigs
from llmfleet.reconcile.machinery.secrets import SecretUnreadableError, read_token

KEY = "sk-team-a-7f3c"
REF = SecretKeyRef(name="api-keys", key="key")
SECRET_PATH = "/api/v1/namespaces/team/secrets/api-keys"
WANTED = (Wanted("sql", "/adapters/sql"), Wanted("chat", "org/chat-lora"))


@pytest.fixture
def api() -> Iterator[HubStub]:
    with hub_stub() as stub:
        yield stub


def core(api: HubStub) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))


def serve(api: HubStub, data: dict[str, bytes]) -> None:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": REF.name}, "data": encoded}
    api.answers[SECRET_PATH] = Answer(body=json.dumps(secret).encode())


def status_body(code: int) -> Answer:
    reason = {403: "Forbidden", 404: "NotFound"}[code]
    body = {"kind": "Status", "status": "Failure", "reason": reason, "code": code}
    return Answer(code, json.dumps(body).encode(), {"Content-Type": "application/json"})


def test_the_key_is_read_from_the_secret_and_sent_as_a_bearer(api: HubStub) -> None:
    serve(api, {"key": f"{KEY}\n".encode()})

    token = read_token(core(api), "team", REF)

    assert token.headers() == {"Authorization": f"Bearer {KEY}"}


def test_a_changed_secret_is_read_anew(api: HubStub) -> None:
    serve(api, {"key": b"sk-old"})
    before = read_token(core(api), "team", REF)
    serve(api, {"key": KEY.encode()})

    assert (before.value, read_token(core(api), "team", REF).value) == ("sk-old", KEY)


CASES = {
    "operator-may-not-read-secrets": (
        status_body(403),
        "APIKeySecretForbidden",
        "spec.engine.apiKeySecretRef: the operator may not read Secret api-keys (enable the "
        "chart value rbac.readSecrets)",
    ),
    "secret-missing": (
        status_body(404),
        "APIKeySecretNotFound",
        'spec.engine.apiKeySecretRef: secret "api-keys" not found',
    ),
    "key-missing": (
        {"other": KEY.encode()},
        "APIKeySecretKeyNotFound",
        "spec.engine.apiKeySecretRef: Secret api-keys has no key key",
    ),
    "two-lines": (
        {"key": f"{KEY}\nsecond-line".encode()},
        "APIKeySecretNotText",
        "spec.engine.apiKeySecretRef: Secret api-keys key key is empty or not one line of "
        "printable ASCII text",
    ),
    "empty": ({"key": b""}, "APIKeySecretNotText", "key key is empty"),
    "not-utf8": ({"key": b"\xff\xfe"}, "APIKeySecretNotText", "key key is empty"),
}


@pytest.mark.parametrize(("served", "reason", "said"), CASES.values(), ids=CASES.keys())
def test_a_key_the_operator_cannot_read_makes_adapters_ready_false_naming_the_field(
    api: HubStub, served: Answer | dict[str, bytes], reason: str, said: str
) -> None:
    if isinstance(served, Answer):
        api.answers[SECRET_PATH] = served
    else:
        serve(api, served)

    with pytest.raises(SecretUnreadableError) as raised:
        read_token(core(api), "team", REF)
    report = key_unreadable(WANTED, raised.value, generation=4)

    c = report.condition
    assert (c.type, c.status, c.reason, c.observed_generation) == (
        "AdaptersReady",
        "False",
        reason,
        4,
    )
    assert said in c.message
    assert "it loads and unloads no adapter, and new engines stay out of service" in c.message
    assert [(s.name, s.engines, s.of) for s in report.statuses] == [("sql", 0, 0), ("chat", 0, 0)]
    assert all("spec.engine.apiKeySecretRef" in str(s.error) for s in report.statuses)


def test_the_hub_token_is_read_the_same_way_and_names_the_same_chart_value(api: HubStub) -> None:
    api.answers["/api/v1/namespaces/team/secrets/hf"] = status_body(403)
    model = ModelSpec(name="org/m", tokenSecretRef={"name": "hf", "key": "token"})

    token, why = ModelConfigs(k8s.ApiClient(k8s.Configuration(host=api.url)))._token(model, "team")

    assert token is None
    assert why == "the operator may not read Secret hf (enable the chart value rbac.readSecrets)"


def test_the_key_appears_in_no_log_message_or_repr(
    api: HubStub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the kubernetes client logs response bodies at DEBUG
    serve(api, {"key": KEY.encode()})
    token = read_token(core(api), "team", REF)
    serve(api, {"key": f"{KEY}\r\nX-Injected: 1".encode()})
    with pytest.raises(SecretUnreadableError) as raised:
        read_token(core(api), "team", REF)

    encoded = base64.b64encode(KEY.encode()).decode()
    said = [caplog.text, repr(token), str(token), str(raised.value), repr(raised.value)]
    assert token.value == KEY
    assert not [s for s in said if KEY in s or encoded in s]
    assert "key key" in str(raised.value)


def adapters_ready(reason: str, message: str) -> Condition:
    return condition("AdaptersReady", "False", reason, message, 1)


FORBIDDEN = adapters_ready("APIKeySecretForbidden", "may not read Secret api-keys")
MISSING = adapters_ready("APIKeySecretNotFound", 'secret "api-keys" not found')
KUBELET_SAYS_MISSING = Blocker(
    "spec.engine.apiKeySecretRef",
    "APIKeySecretNotFound",
    'secret "api-keys" not found',
    "kubelet: CreateContainerConfigError",
    "p-0",
)


@pytest.mark.parametrize(
    ("before", "after", "blockers", "announced"),
    [
        pytest.param(
            [condition("AdaptersReady", TRUE, "AdaptersLoaded", "", 1)],
            [FORBIDDEN],
            [],
            FORBIDDEN,
            id="turns-unreadable",
        ),
        pytest.param([], [FORBIDDEN], [], FORBIDDEN, id="first-status"),
        pytest.param([FORBIDDEN], [FORBIDDEN], [], None, id="stays-unreadable"),
        pytest.param([FORBIDDEN], [MISSING], [], MISSING, id="another-cause"),
        pytest.param([], [MISSING], [KUBELET_SAYS_MISSING], None, id="the-pods-say-it-already"),
        pytest.param(
            [FORBIDDEN], [adapters_ready("AdapterLoadFailed", "x")], [], None, id="readable-again"
        ),
    ],
)
def test_one_warning_event_when_the_key_turns_unreadable(
    before: list[Condition],
    after: list[Condition],
    blockers: list[Blocker],
    announced: Condition | None,
) -> None:
    assert newly_keyless(before, after, blockers) == announced
