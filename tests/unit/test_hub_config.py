"""Reading a model's config.json from the Hub (a real HTTP server on 127.0.0.1 standing in for
it): the address, what each answer means, the token, and the cache."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubstub import Answer, HubStub, hub_stub

from llmfleet.catalog.hub import (
    ConfigCache,
    ConfigSource,
    HubDeniedError,
    HubError,
    HubNotFoundError,
    HubUnavailableError,
    NotAConfigError,
    config_url,
    read_config,
)
from llmfleet.models.model_spec import ModelSpec

CONFIG = json.loads((Path(__file__).parent / "data/llama-3.1-8b-config.json").read_text())
REPO = "acme-labs/llama-8b-ft"
SHA = "0e9e39f249a16976918f6564b8830bc894c89659"


@pytest.fixture
def hub() -> Iterator[HubStub]:
    with hub_stub() as stub:
        yield stub


@pytest.mark.parametrize(
    ("endpoint", "revision", "url"),
    [
        pytest.param(
            "https://huggingface.co",
            "main",
            f"https://huggingface.co/{REPO}/resolve/main/config.json",
            id="the-hub",
        ),
        pytest.param(
            "http://mirror:8080/hf/",
            "v1.0",
            f"http://mirror:8080/hf/{REPO}/resolve/v1.0/config.json",
            id="a-mirror-with-a-path-and-a-trailing-slash",
        ),
        pytest.param(
            "https://huggingface.co",
            "refs/pr/1",
            f"https://huggingface.co/{REPO}/resolve/refs%2Fpr%2F1/config.json",
            id="a-pull-request-ref-stays-one-segment",
        ),
    ],
)
def test_config_url_is_where_the_hub_serves_the_file(
    endpoint: str, revision: str, url: str
) -> None:
    assert config_url(endpoint, REPO, revision) == url


def test_a_served_config_is_read_with_the_token_when_one_is_given(hub: HubStub) -> None:
    hub.serve_config(REPO, CONFIG)
    url = config_url(hub.url, REPO, "main")

    assert read_config(url) == CONFIG
    assert read_config(url, "hf_secret") == CONFIG
    without, with_token = hub.asked(REPO)
    assert "Authorization" not in without
    assert with_token["Authorization"] == "Bearer hf_secret"


@pytest.mark.parametrize(
    ("answer", "error", "said"),
    [
        pytest.param(
            Answer(401, headers={"X-Error-Code": "GatedRepo"}), HubDeniedError, "401", id="gated"
        ),
        pytest.param(Answer(403), HubDeniedError, "403", id="forbidden"),
        pytest.param(
            Answer(404, headers={"X-Error-Code": "RevisionNotFound"}),
            HubNotFoundError,
            "RevisionNotFound",
            id="no-such-revision",
        ),
        pytest.param(Answer(500), HubUnavailableError, "500", id="server-error"),
        pytest.param(Answer(429), HubUnavailableError, "429", id="throttled"),
        pytest.param(Answer(body=b"<html>"), NotAConfigError, "not JSON", id="not-json"),
        pytest.param(Answer(body=b"[1, 2]"), NotAConfigError, "not a JSON object", id="a-list"),
        pytest.param(Answer(delay=1.0), HubUnavailableError, "timed out", id="too-slow"),
    ],
)
def test_each_answer_is_an_error_that_says_what_the_hub_said(
    hub: HubStub, answer: Answer, error: type[HubError], said: str
) -> None:
    hub.answer(REPO, answer)
    url = config_url(hub.url, REPO, "main")
    # Only the slow answer may time out: under a loaded machine a 0.3 s limit also cut prompt
    # answers short (the 404 case failed once as "timed out").
    timeout = 0.3 if answer.delay else 10.0

    with pytest.raises(error) as raised:
        read_config(url, timeout=timeout)

    assert url in str(raised.value)
    assert said in str(raised.value)


def test_a_hub_that_does_not_listen_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens
    with pytest.raises(HubUnavailableError, match=re.escape("no answer from http://127.0.0.1")):
        read_config(config_url(f"http://127.0.0.1:{port}", REPO, "main"))


@pytest.mark.parametrize(
    ("host", "keeps_token"),
    [
        pytest.param("127.0.0.1", True, id="same-host-keeps-the-token"),
        pytest.param("localhost", False, id="another-host-gets-no-token"),
    ],
)
def test_a_redirect_carries_the_token_only_to_the_same_host(
    hub: HubStub, host: str, keeps_token: bool
) -> None:
    port = hub.url.rsplit(":", 1)[1]
    hub.serve_config("acme-labs/renamed", CONFIG)
    moved = f"http://{host}:{port}/acme-labs/renamed/resolve/main/config.json"
    hub.answer(REPO, Answer(307, headers={"Location": moved}))

    assert read_config(config_url(hub.url, REPO, "main"), "hf_secret") == CONFIG
    (followed,) = hub.asked("acme-labs/renamed")
    assert ("Authorization" in followed) == keeps_token


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A read() for the cache that counts its calls and fails while told to."""

    def __init__(self) -> None:
        self.count = 0
        self.error: HubError | None = None

    def __call__(self) -> dict[str, object]:
        self.count += 1
        if self.error is not None:
            raise self.error
        return {"read": self.count}


@pytest.mark.parametrize(
    ("revision", "reads_after_two_hours"),
    [
        pytest.param(SHA, 1, id="a-commit-is-read-once-for-the-process"),
        pytest.param("main", 2, id="a-branch-is-read-again-after-the-ttl"),
    ],
)
def test_the_cache_keeps_commits_and_refreshes_branches(
    revision: str, reads_after_two_hours: int
) -> None:
    clock, reads = Clock(), Reads()
    cache = ConfigCache(ttl=3600, clock=clock)

    cache.get("https://hub", REPO, revision, reads)
    clock.now = 3599
    cache.get("https://hub", REPO, revision, reads)
    assert reads.count == 1
    clock.now = 7200
    cache.get("https://hub/", REPO, revision, reads)
    assert reads.count == reads_after_two_hours


def test_endpoints_models_and_revisions_are_cached_apart() -> None:
    cache, reads = ConfigCache(), Reads()
    for endpoint, repo, revision in [
        ("https://hub", REPO, "main"),
        ("https://mirror", REPO, "main"),
        ("https://hub", "acme-labs/other", "main"),
        ("https://hub", REPO, "v2"),
        ("https://hub", REPO, "main"),
    ]:
        cache.get(endpoint, repo, revision, reads)

    assert reads.count == 4


def test_a_stale_branch_serves_while_the_hub_is_down_but_not_once_it_is_gone() -> None:
    clock, reads = Clock(), Reads()
    cache = ConfigCache(ttl=3600, clock=clock)
    first = cache.get("https://hub", REPO, "main", reads)
    clock.now = 4000
    reads.error = HubUnavailableError("u", "down")

    assert cache.get("https://hub", REPO, "main", reads) == first
    assert cache.get("https://hub", REPO, "main", reads) == first
    assert reads.count == 2  # asked again a minute later, not on every reconcile
    clock.now = 4100
    reads.error = HubNotFoundError("u", "deleted", 404)
    with pytest.raises(HubNotFoundError):
        cache.get("https://hub", REPO, "main", reads)


def test_nothing_is_cached_from_a_failed_first_read() -> None:
    cache, reads = ConfigCache(), Reads()
    reads.error = HubUnavailableError("u", "down")
    with pytest.raises(HubUnavailableError):
        cache.get("https://hub", REPO, "main", reads)
    reads.error = None

    assert cache.get("https://hub", REPO, "main", reads) == {"read": 2}


@pytest.mark.parametrize(
    ("model", "read"),
    [
        pytest.param({"name": REPO}, True, id="a-hub-repo-is-read-once"),
        pytest.param({"name": REPO, "revision": SHA}, True, id="a-commit-is-read-once"),
        pytest.param({"name": "/models/llama"}, False, id="a-path-is-not-the-hubs"),
        pytest.param(
            {"name": "meta-llama/Llama-3.1-8B-Instruct"}, False, id="a-catalog-model-needs-none"
        ),
    ],
)
def test_the_config_source_asks_the_hub_and_the_token_only_for_a_config_it_needs(
    hub: HubStub, model: dict[str, object], read: bool
) -> None:
    """The source `llmfleet plan` and the reconciles both read config.json through."""
    hub.serve_config(REPO, CONFIG, str(model.get("revision") or "main"))
    source = ConfigSource(hub.url)
    spec = ModelSpec.model_validate(model)
    tokens: list[str] = []

    def token() -> str:
        tokens.append("asked")
        return "hf_secret"

    found = [source.for_model(spec, token) for _ in range(2)]

    assert found == ([CONFIG, CONFIG] if read else [None, None])
    assert len(hub.requests) == len(tokens) == (1 if read else 0)
    if read:
        assert hub.requests[0][1]["Authorization"] == "Bearer hf_secret"
