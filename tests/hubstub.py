"""A stand-in for the Hugging Face Hub on 127.0.0.1 (what HF_ENDPOINT points at in tests): it
serves config.json at the Hub's `/{repo}/resolve/{revision}/config.json`, a whole repo at a
revision as the Hub's HTTP API lists and serves it (`/api/models/{repo}/revision/{revision}`,
then each file's `/resolve/`), answers any path as a test tells it to (an error status, the
Hub's X-Error-Code, a redirect, a delay), and keeps the requests it got, headers included."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


# What the Hub answers for a repo it does not have (to a request without a token it says 401).
NOT_FOUND = Answer(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})


def config_path(repo: str, revision: str = "main") -> str:
    return file_path(repo, revision, "config.json")


def file_path(repo: str, revision: str, name: str) -> str:
    return f"/{repo}/resolve/{quote(revision, safe='')}/{quote(name)}"


def revision_info_path(repo: str, revision: str) -> str:
    return f"/api/models/{repo}/revision/{quote(revision, safe='')}"


@dataclass
class HubStub:
    url: str = ""
    answers: dict[str, Answer] = field(default_factory=dict)
    # (path, headers) of every request, in order.
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def serve_config(self, repo: str, config: Mapping[str, Any], revision: str = "main") -> None:
        self.answers[config_path(repo, revision)] = Answer(body=json.dumps(config).encode())

    def answer(self, repo: str, answer: Answer, revision: str = "main") -> None:
        self.answers[config_path(repo, revision)] = answer

    def serve_repo(
        self, repo: str, revision: str, files: Mapping[str, bytes], commit: str | None = None
    ) -> None:
        """The repo at `revision` as the Hub serves it: its file list (with the commit the
        revision names, when given) and each file at that commit, else at the revision."""
        info: dict[str, Any] = {"id": repo, "siblings": [{"rfilename": n} for n in files]}
        if commit is not None:
            info["sha"] = commit
        self.answers[revision_info_path(repo, revision)] = Answer(body=json.dumps(info).encode())
        for name, body in files.items():
            self.answers[file_path(repo, commit or revision, name)] = Answer(body=body)

    def asked(self, repo: str, revision: str = "main") -> list[dict[str, str]]:
        """The headers of each request for `repo`'s config.json."""
        return [h for path, h in self.requests if path == config_path(repo, revision)]


@contextmanager
def hub_stub() -> Iterator[HubStub]:
    stub = HubStub()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stub.requests.append((self.path, dict(self.headers)))
            answer = stub.answers.get(self.path, NOT_FOUND)
            time.sleep(answer.delay)
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="hub-stub", daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
