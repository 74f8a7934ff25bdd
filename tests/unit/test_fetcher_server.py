"""The adapter fetcher's HTTP API as the operator calls it (`llmfleet fetch-adapters`): health,
fetch and prune, every error as `{"error": {"message": ...}}` with its status, on a real
server on 127.0.0.1 with a fake download behind it."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmfleet.cli import build_parser
from llmfleet.fetcher.errors import FetchError
from llmfleet.fetcher.paths import FETCH_ROOT, FETCHER_PORT, fetched_path
from llmfleet.fetcher.server import FetcherServer
from llmfleet.fetcher.sources import HubSource, ObjectSource
from llmfleet.fetcher.store import DEFAULT_MAX_BYTES, AdapterStore

TOKEN = "the-operators-token"


def download(source: ObjectSource | HubSource, folder: Path, _limit: int) -> int:
    """A fake store: `s3://bucket/missing/...` is not there, every other source is an adapter."""
    if isinstance(source, ObjectSource) and source.prefix.startswith("missing/"):
        raise FetchError(404, f"nothing under {source.uri}")
    (folder / "adapter_config.json").write_text("{}")
    return 2


@pytest.fixture(scope="module")
def fetcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FetcherServer]:
    store = AdapterStore(tmp_path_factory.mktemp("adapters"), download)
    store.start()
    server = FetcherServer(("127.0.0.1", 0), store, TOKEN)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def call(
    server: FetcherServer,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = None,
) -> tuple[int, Any]:
    """As the operator calls: with the token, unless another is given ("": none at all)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    token = TOKEN if token is None else token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(
        f"{server.url}{path}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        with e:
            kind = e.headers["Content-Type"]
            status, answer = e.code, json.loads(e.read())
    assert kind == "application/json"
    return status, answer


def test_healthz_answers_200(fetcher: FetcherServer) -> None:
    # The kubelet's probe carries no token.
    assert call(fetcher, "GET", "/healthz", token="") == (200, {"status": "ok"})


@pytest.mark.parametrize("token", ["", "wrong", "the-operators-token-and-more", "the-operators"])
@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/fetch", {"source": "s3://bucket/sneaky"}), ("/v1/prune", {"keep": []})],
)
def test_only_the_operators_token_may_fetch_or_prune(
    fetcher: FetcherServer, path: str, body: dict[str, Any], token: str
) -> None:
    before = sorted(p.name for p in fetcher.store.root.iterdir())

    code, answer = call(fetcher, "POST", path, body, token=token)

    assert code == 401
    assert "only the operator" in answer["error"]["message"]
    assert sorted(p.name for p in fetcher.store.root.iterdir()) == before  # nothing fetched


def test_a_fetch_with_the_token_is_served(fetcher: FetcherServer) -> None:
    code, answer = call(fetcher, "POST", "/v1/fetch", {"source": "s3://bucket/asked"})

    assert code == 200
    assert Path(answer["path"]).is_dir()


def test_the_fetcher_does_not_serve_without_a_token(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="LLMFLEET_FETCHER_TOKEN"):
        FetcherServer(("127.0.0.1", 0), AdapterStore(tmp_path, download), "")


def test_the_command_does_not_start_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMFLEET_FETCHER_TOKEN", raising=False)
    args = build_parser().parse_args(["fetch-adapters", "--dir", str(tmp_path), "--port", "0"])

    with pytest.raises(SystemExit, match="LLMFLEET_FETCHER_TOKEN is empty"):
        args.func(args)


def test_a_fetch_answers_the_path_the_operator_computes(fetcher: FetcherServer) -> None:
    root = str(fetcher.store.root)
    for source, revision in (("s3://bucket/adapters/x", None), ("acme/lora", "v1")):
        body = {"source": source, "revision": revision}
        assert call(fetcher, "POST", "/v1/fetch", body) == (
            200,
            {"path": fetched_path(source, revision, root)},
        )


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "says"),
    [
        pytest.param("POST", "/v1/fetch", {"source": "/data/lora"}, 400, "local path", id="local"),
        pytest.param("POST", "/v1/fetch", {"source": "acme/lora"}, 400, "revision", id="hub-main"),
        pytest.param("POST", "/v1/fetch", {"src": "s3://b/x"}, 400, "unknown fields", id="typo"),
        pytest.param("POST", "/v1/fetch", b"not json", 400, "not a JSON object", id="not-json"),
        pytest.param("POST", "/v1/fetch", [1], 400, "not a JSON object", id="a-list"),
        pytest.param("POST", "/v1/fetch", None, 400, "a JSON body", id="no-body"),
        pytest.param(
            "POST", "/v1/fetch", {"source": "s3://bucket/missing/x"}, 404, "nothing under",
            id="the-store's-404",
        ),
        pytest.param("POST", "/v1/prune", {"keep": "a"}, 400, "list of paths", id="keep-a-string"),
        pytest.param("POST", "/v1/prune", {}, 400, "list of paths", id="no-keep"),
        pytest.param("POST", "/v1/load", {}, 404, "no /v1/load here", id="unknown-path"),
        pytest.param("GET", "/v1/fetch", None, 404, "no /v1/fetch here", id="get-fetch"),
    ],
)  # fmt: skip
def test_every_error_answers_a_message_with_its_status(
    fetcher: FetcherServer, method: str, path: str, body: Any, status: int, says: str
) -> None:
    code, answer = call(fetcher, method, path, body)

    assert code == status
    assert says in answer["error"]["message"]


def test_prune_answers_what_it_removed(fetcher: FetcherServer) -> None:
    _, kept = call(fetcher, "POST", "/v1/fetch", {"source": "s3://bucket/kept"})
    _, gone = call(fetcher, "POST", "/v1/fetch", {"source": "s3://bucket/gone"})
    others = [str(p) for p in fetcher.store.root.iterdir() if str(p) != kept["path"]]

    code, answer = call(fetcher, "POST", "/v1/prune", {"keep": [kept["path"]]})

    assert code == 200
    assert gone["path"] in answer["removed"]
    assert sorted(answer["removed"]) == sorted(others)
    assert [str(p) for p in fetcher.store.root.iterdir()] == [kept["path"]]


def test_the_command_line_defaults_are_the_pods() -> None:
    args = build_parser().parse_args(["fetch-adapters"])

    assert (args.port, str(args.dir), args.max_bytes) == (FETCHER_PORT, FETCH_ROOT, 8 << 30)
    assert args.max_bytes == DEFAULT_MAX_BYTES
    assert (args.s3_endpoint, args.gs_endpoint) == (None, "https://storage.googleapis.com")


@pytest.mark.parametrize(
    "flags",
    [["--max-bytes", "0"], ["--max-bytes", "lots"], ["--s3-endpoint", "minio:9000"]],
)
def test_bad_flags_stop_the_command(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fetch-adapters", *flags])
    assert flags[0] in capsys.readouterr().err
