"""The adapter fetcher (`llmfleet fetch-adapters`, the process the LoRA engine pod's second
container runs) fetching s3:// prefixes from a real S3 API server: versitygw on 127.0.0.1
(dev/localcluster/objectstore.py, built on first use), credentials from the environment as the
pod's Secret gives them.

It needs no API server: the module opts out of the tier's chart (and so of the API server
under it), and sits in this tier because the tier is where tests start local servers of their
own in seconds; `make check` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from localcluster import httpwait
from localcluster.objectstore import ObjectStore, object_store
from localcluster.ports import free_port
from localcluster.tools import REPO

from llmfleet.fetcher.paths import fetched_path

ADAPTER = {
    "adapter_config.json": b'{"r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}',
    "adapter_model.safetensors": os.urandom(300_000),
}


@pytest.fixture(scope="module")
def chart() -> None:
    """Overrides the tier's autouse chart: nothing here talks to Kubernetes."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with object_store() as s:
        adapter = tmp_path_factory.mktemp("adapter")
        for name, body in ADAPTER.items():
            (adapter / name).write_bytes(body)
        s.put_folder(adapter, "bucket", "adapters/x")
        (adapter / "adapter_config.json").unlink()
        s.put_folder(adapter, "bucket", "weights-only")
        yield s


# What the operator sends; the fetcher refuses fetches without it.
FETCHER_TOKEN = "operator-token-for-this-test"


@contextmanager
def fetcher(store: ObjectStore, root: Path, secret: str) -> Iterator[str]:
    """`llmfleet fetch-adapters` against the store, with these credentials; its URL."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(REPO / "operator" / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        "AWS_ACCESS_KEY_ID": store.access_key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_CONFIG_FILE": os.devnull,  # the machine's own AWS profile plays no part
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "LLMFLEET_FETCHER_TOKEN": FETCHER_TOKEN,
    }
    cmd = [
        sys.executable, "-m", "llmfleet.cli", "fetch-adapters",
        "--host", "127.0.0.1", "--port", str(port), "--dir", str(root),
        "--s3-endpoint", store.endpoint, "--s3-region", store.region,
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, stderr=log, text=True)

        def logged() -> str:
            log.seek(0)
            return log.read()

        def running() -> None:
            if proc.poll() is not None:
                raise RuntimeError(f"llmfleet fetch-adapters exited: {logged()}")

        try:
            httpwait.wait(f"{url}/healthz", "the adapter fetcher", running, timeout=60)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        assert secret not in logged()  # never a credential in its log
        assert FETCHER_TOKEN not in logged()


def fetch(url: str, source: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{url}/v1/fetch",
        data=json.dumps({"source": source, "revision": None}).encode(),
        headers={"Authorization": f"Bearer {FETCHER_TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fetched")


@pytest.fixture(scope="module")
def fetcher_url(store: ObjectStore, adapters: Path) -> Iterator[str]:
    with fetcher(store, adapters, store.secret_key) as url:
        yield url


def test_a_prefix_is_fetched_byte_for_byte_into_its_folder(
    fetcher_url: str, adapters: Path
) -> None:
    status, answer = fetch(fetcher_url, "s3://bucket/adapters/x")

    assert (status, answer) == (
        200,
        {"path": fetched_path("s3://bucket/adapters/x", None, str(adapters))},
    )
    folder = Path(answer["path"])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == ADAPTER
    assert [p.name for p in adapters.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("source", "status", "says"),
    [
        ("s3://bucket/adapters/missing", 404, "nothing under s3://bucket/adapters/missing/"),
        ("s3://no-such-bucket/adapters/x", 404, "no bucket 'no-such-bucket'"),
        ("s3://bucket/weights-only", 422, "no adapter_config.json"),
    ],
)
def test_what_is_not_an_adapter_in_the_store_is_refused_naming_it(
    fetcher_url: str, adapters: Path, source: str, status: int, says: str
) -> None:
    code, answer = fetch(fetcher_url, source)

    assert code == status
    assert says in answer["error"]["message"]
    assert not Path(fetched_path(source, None, str(adapters))).exists()


def test_a_wrong_secret_is_refused_403_naming_the_credentials(
    store: ObjectStore, tmp_path: Path
) -> None:
    with fetcher(store, tmp_path, "not-the-secret") as url:
        code, answer = fetch(url, "s3://bucket/adapters/x")

    assert code == 403
    assert "refused the credentials (AWS_ACCESS_KEY_ID" in answer["error"]["message"]
    assert "s3://bucket/adapters/x" in answer["error"]["message"]
    assert list(tmp_path.iterdir()) == []
