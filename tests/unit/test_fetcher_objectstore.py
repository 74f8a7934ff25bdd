"""The adapter fetcher's s3:// and gs:// side without a store: the boto3 client it makes (path
style, checksums only when required), what each of the store's answers means for the user, and
the checks made on the listing before a byte is downloaded. A fake client stands in for boto3's;
tests/api/test_fetcher_objectstore.py fetches from a real S3 server."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from llmfleet.fetcher.errors import FetchError
from llmfleet.fetcher.objectstore import (
    StoreConfig,
    fetch_prefix,
    make_client,
    refusal,
)
from llmfleet.fetcher.sources import ObjectSource

SOURCE = ObjectSource("s3", "bucket", "adapters/x/")
CONFIG = b'{"r": 8}'


class FakeS3:
    """Just what fetch_prefix calls of a boto3 S3 client: a listing in pages, then objects."""

    def __init__(self, objects: dict[str, bytes], error: Exception | None = None) -> None:
        self.objects = objects
        self.error = error
        self.got: list[str] = []

    def get_paginator(self, operation: str) -> FakeS3:
        assert operation == "list_objects_v2"
        return self

    def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, Any]]:  # noqa: N803 (boto3's)
        if self.error is not None:
            raise self.error
        contents = [
            {"Key": k, "Size": len(v)} for k, v in self.objects.items() if k.startswith(Prefix)
        ]
        return [{"Contents": contents[:1]}, {"Contents": contents[1:]}, {}]

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 (boto3's)
        self.got.append(Key)
        return {"Body": io.BytesIO(self.objects[Key])}


def objects(files: dict[str, bytes]) -> dict[str, bytes]:
    """The store's objects: `files` under the source's prefix."""
    return {SOURCE.prefix + name: body for name, body in files.items()}


def test_every_object_under_the_prefix_lands_at_its_relative_path(tmp_path: Path) -> None:
    store = objects({"adapter_config.json": CONFIG, "sub/weights": b"w" * 10})
    store["adapters/x/folder-marker/"] = b""
    store["adapters/xy/other"] = b"not under adapters/x/"

    written = fetch_prefix(FakeS3(store), SOURCE, tmp_path, limit=1000)

    assert written == len(CONFIG) + 10
    assert (tmp_path / "adapter_config.json").read_bytes() == CONFIG
    assert (tmp_path / "sub" / "weights").read_bytes() == b"w" * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter_config.json", "sub"]


@pytest.mark.parametrize(
    ("store", "limit", "status", "says"),
    [
        pytest.param({}, 100, 404, "nothing under s3://bucket/adapters/x/", id="empty-prefix"),
        pytest.param(
            objects({"weights": b"w"}), 100, 422, "no adapter_config.json", id="no-adapter-config"
        ),
        pytest.param(
            objects({"adapter_config.json": CONFIG, "weights": b"w" * 100}),
            50,
            413,
            "larger than the fetcher's limit of 50 bytes",
            id="too-large",
        ),
    ],
)
def test_the_listing_is_checked_before_any_download(
    tmp_path: Path, store: dict[str, bytes], limit: int, status: int, says: str
) -> None:
    client = FakeS3(store)

    with pytest.raises(FetchError) as failed:
        fetch_prefix(client, SOURCE, tmp_path, limit)

    assert (failed.value.status, client.got) == (status, [])
    assert says in failed.value.message
    assert SOURCE.uri in failed.value.message


def test_a_key_that_would_leave_the_folder_is_refused(tmp_path: Path) -> None:
    store = objects({"adapter_config.json": CONFIG})
    store["adapters/x/../../escape"] = b"x"

    with pytest.raises(FetchError) as failed:
        fetch_prefix(FakeS3(store), SOURCE, tmp_path / "adapter", 1000)

    assert failed.value.status == 502
    assert not (tmp_path / "escape").exists()


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "..."}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ListObjectsV2",
    )


@pytest.mark.parametrize(
    ("error", "status", "says"),
    [
        (client_error("NoSuchBucket", 404), 404, "no bucket 'bucket'"),
        (client_error("AccessDenied", 403), 403, "refused the credentials (AWS_ACCESS_KEY_ID"),
        (client_error("InvalidAccessKeyId", 403), 403, "refused the credentials"),
        (client_error("SignatureDoesNotMatch", 403), 403, "refused the credentials"),
        (client_error("ExpiredToken", 400), 403, "IRSA"),
        (client_error("SlowDown", 503), 502, "answered SlowDown"),
        (client_error("InternalError", 500), 502, "retry"),
        (NoCredentialsError(), 403, "no usable credentials"),
        (EndpointConnectionError(endpoint_url="http://s3.local"), 502, "did not answer"),
        (ReadTimeoutError(endpoint_url="http://s3.local"), 502, "did not answer"),
    ],
)
def test_each_store_failure_answers_what_the_user_can_do(
    tmp_path: Path, error: Exception, status: int, says: str
) -> None:
    with pytest.raises(FetchError) as failed:
        fetch_prefix(FakeS3({}, error), SOURCE, tmp_path, 100)

    assert failed.value.status == status
    assert says in failed.value.message
    assert SOURCE.uri in failed.value.message


def test_gcs_refusals_name_its_hmac_keys() -> None:
    denied = refusal(
        ObjectSource("gs", "bucket", "x/"),
        {"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
    )
    assert denied.status == 403
    assert "GCS HMAC keys" in denied.message


@pytest.mark.parametrize(
    ("scheme", "config", "endpoint", "region", "path_style"),
    [
        ("s3", StoreConfig(), "https://s3.amazonaws.com", "us-east-1", False),
        (
            "s3",
            StoreConfig(s3_endpoint="http://minio:9000", s3_region="eu-1"),
            "http://minio:9000",
            "eu-1",
            True,
        ),
        ("gs", StoreConfig(), "https://storage.googleapis.com", "auto", True),
    ],
)
def test_the_client_fits_the_store(
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
    config: StoreConfig,
    endpoint: str,
    region: str,
    path_style: bool,
) -> None:
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    client = make_client(config, scheme)

    assert client.meta.endpoint_url == endpoint
    assert client.meta.region_name == region
    options = client.meta.config
    assert options.request_checksum_calculation == "when_required"
    assert options.response_checksum_validation == "when_required"
    assert ((options.s3 or {}).get("addressing_style") == "path") is path_style
