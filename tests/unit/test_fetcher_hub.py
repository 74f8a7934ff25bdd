"""Fetching a Hugging Face repo at a revision, against tests/hubstub.py: a real HTTP server on
127.0.0.1 standing in for the Hub's HTTP API (the revision's file list, then each file from
/resolve/), as huggingface_hub's snapshot_download reads it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubstub import Answer, HubStub, file_path, hub_stub, revision_info_path

from llmfleet.fetcher.errors import FetchError
from llmfleet.fetcher.hub import Hub
from llmfleet.fetcher.sources import HubSource

REPO = "acme/sql-lora"
COMMIT = "0e9e39f249a16976918f6564b8830bc894c89659"
FILES = {
    "adapter_config.json": b'{"r": 8, "peft_type": "LORA"}',
    "adapter_model.safetensors": bytes(range(256)) * 40,
    "sub dir/notes.md": b"# trained on sql",
}


@pytest.fixture(scope="module")
def running_hub() -> Iterator[HubStub]:
    with hub_stub() as stub:  # one for the module: each stop waits out a 0.5 s poll
        yield stub


@pytest.fixture
def hub(running_hub: HubStub) -> HubStub:
    running_hub.answers.clear()
    running_hub.requests.clear()
    return running_hub


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("revision", ["v1.0", "refs/pr/1", COMMIT])
def test_every_file_of_the_revision_is_fetched_at_the_commit_it_named(
    hub: HubStub, tmp_path: Path, revision: str
) -> None:
    hub.serve_repo(REPO, revision, FILES, commit=COMMIT)

    written = Hub(hub.url).fetch(HubSource(REPO, revision), tmp_path, limit=1 << 20)

    assert tree(tmp_path) == FILES
    assert written == sum(map(len, FILES.values()))
    paths = [path for path, _ in hub.requests]
    assert paths[0] == revision_info_path(REPO, revision)
    assert sorted(paths[1:]) == sorted(file_path(REPO, COMMIT, name) for name in FILES)


def test_without_a_commit_in_the_listing_files_come_at_the_revision(
    hub: HubStub, tmp_path: Path
) -> None:
    hub.serve_repo(REPO, "v1.0", FILES)

    Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    assert tree(tmp_path) == FILES


@pytest.mark.parametrize("token", [None, "hf_secret"])
def test_the_token_goes_with_every_request_when_there_is_one(
    hub: HubStub, tmp_path: Path, token: str | None
) -> None:
    hub.serve_repo(REPO, "v1.0", FILES, commit=COMMIT)

    Hub(hub.url, token).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    sent = {headers.get("Authorization") for _, headers in hub.requests}
    assert sent == {f"Bearer {token}" if token else None}


def test_the_endpoint_and_token_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror:8080/hf/")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")

    assert Hub.from_env() == Hub("http://mirror:8080/hf", "hf_secret")


def refused(status: int, code: str = "") -> Answer:
    return Answer(status, b"refused", {"X-Error-Code": code} if code else {})


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        pytest.param(refused(404, "RepoNotFound"), 404, "has no", id="no-such-repo"),
        pytest.param(refused(401, "RepoNotFound"), 404, "has no", id="no-such-repo-no-token"),
        pytest.param(refused(404, "RevisionNotFound"), 404, "has no", id="no-such-revision"),
        pytest.param(refused(403, "GatedRepo"), 403, "gated/private", id="gated"),
        pytest.param(refused(401), 403, "spec.model.tokenSecretRef", id="private"),
        pytest.param(refused(500), 502, "answered 500", id="hub-error"),
        pytest.param(refused(429), 502, "retry", id="rate-limited"),
        pytest.param(Answer(body=b"<html>"), 502, "not answer a JSON object", id="not-json"),
    ],
)
def test_each_hub_answer_to_the_listing_says_what_to_do(
    hub: HubStub, tmp_path: Path, answer: Answer, status: int, says: str
) -> None:
    hub.answers[revision_info_path(REPO, "v1.0")] = answer

    with pytest.raises(FetchError) as failed:
        Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    assert failed.value.status == status
    assert says in failed.value.message
    assert REPO in failed.value.message


def test_a_repo_without_adapter_config_is_refused_before_any_download(
    hub: HubStub, tmp_path: Path
) -> None:
    hub.serve_repo(REPO, "v1.0", {"model.safetensors": b"w"})

    with pytest.raises(FetchError) as failed:
        Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    assert failed.value.status == 422
    assert len(hub.requests) == 1


def test_a_revision_larger_than_the_limit_stops_at_the_limit(hub: HubStub, tmp_path: Path) -> None:
    hub.serve_repo(REPO, "v1.0", FILES, commit=COMMIT)

    with pytest.raises(FetchError) as failed:
        Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1000)

    assert failed.value.status == 413
    assert sum(len(b) for b in tree(tmp_path).values()) <= 1000 + (1 << 20)


def test_a_file_listed_but_missing_fails_the_fetch(hub: HubStub, tmp_path: Path) -> None:
    hub.serve_repo(REPO, "v1.0", FILES, commit=COMMIT)
    del hub.answers[file_path(REPO, COMMIT, "adapter_model.safetensors")]

    with pytest.raises(FetchError) as failed:
        Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    assert failed.value.status == 404


def test_a_listed_name_that_would_leave_the_folder_is_refused(hub: HubStub, tmp_path: Path) -> None:
    info = {"siblings": [{"rfilename": "adapter_config.json"}, {"rfilename": "../escape"}]}
    hub.answers[revision_info_path(REPO, "v1.0")] = Answer(body=json.dumps(info).encode())
    hub.answers[file_path(REPO, "v1.0", "adapter_config.json")] = Answer(body=b"{}")

    with pytest.raises(FetchError) as failed:
        Hub(hub.url).fetch(HubSource(REPO, "v1.0"), tmp_path / "adapter", limit=1 << 20)

    assert failed.value.status == 502
    assert not (tmp_path / "escape").exists()


def test_a_hub_that_does_not_answer_is_a_bad_gateway(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"

    with pytest.raises(FetchError) as failed:
        Hub(closed, timeout=2).fetch(HubSource(REPO, "v1.0"), tmp_path, limit=1 << 20)

    assert failed.value.status == 502
    assert "no answer from" in failed.value.message
