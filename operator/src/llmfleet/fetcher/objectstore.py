"""Fetching s3:// and gs:// prefixes with boto3.

Credentials come from boto3's default chain, nothing of the fetcher's own: on EKS the pod's
IRSA web identity (AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, which EKS injects), elsewhere
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from a Secret in the fetcher container's
environment. gs:// goes to GCS's S3-compatible XML API (--gs-endpoint) with the same client, so
it needs GCS HMAC keys in those same two variables: GKE Workload Identity without HMAC keys is
not supported (the XML API's SigV4 signing takes only HMAC keys).

With --s3-endpoint (MinIO, Ceph, versitygw, R2...) requests use path-style addressing, which
every S3-compatible store takes, where virtual-host style needs a DNS name per bucket. Checksums
are sent and checked only when the API requires them: boto3's newer defaults (CRC checksums on
every request) are refused by several S3-compatible stores and by GCS's XML API."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from llmfleet.fetcher.errors import (
    BAD_GATEWAY,
    FORBIDDEN,
    NOT_FOUND,
    FetchError,
    too_large,
)
from llmfleet.fetcher.files import Budget, destination, require_adapter_config, write
from llmfleet.fetcher.sources import ObjectSource

DEFAULT_GS_ENDPOINT = "https://storage.googleapis.com"
# GCS's XML API takes any SigV4 region; "auto" is what its documentation uses.
GS_REGION = "auto"
# What the store says when it refuses a request's credentials or signature.
_DENIED = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "AccountProblem",
    }
)
T = TypeVar("T")
_CREDENTIALS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the Secret, or the pod's IRSA role",
    "gs": "GCS HMAC keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
}


@dataclass(frozen=True)
class StoreConfig:
    s3_endpoint: str | None = None
    s3_region: str | None = None
    gs_endpoint: str = DEFAULT_GS_ENDPOINT


@dataclass
class ObjectStores:
    """One boto3 client per scheme, made on first use (boto3's clients are thread-safe, its
    sessions are not) and kept: IRSA's credentials refresh inside the client."""

    config: StoreConfig = field(default_factory=StoreConfig)
    _clients: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, scheme: str) -> Any:
        with self._lock:
            if scheme not in self._clients:
                self._clients[scheme] = make_client(self.config, scheme)
            return self._clients[scheme]

    def fetch(self, source: ObjectSource, folder: Path, limit: int) -> int:
        """Downloads every object under the source's prefix into `folder`; the bytes written."""
        return fetch_prefix(self.client(source.scheme), source, folder, limit)


def make_client(config: StoreConfig, scheme: str) -> Any:
    import boto3  # the operator itself never needs it: imported by the fetcher alone
    from botocore.config import Config

    endpoint: str | None
    region: str | None
    if scheme == "gs":
        endpoint, region = config.gs_endpoint, GS_REGION
    else:
        endpoint, region = config.s3_endpoint, config.s3_region
    options: dict[str, Any] = {
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
        "retries": {"mode": "standard", "max_attempts": 3},
        "connect_timeout": 10,
        "read_timeout": 60,
    }
    if endpoint:
        options["s3"] = {"addressing_style": "path"}
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint or None, region_name=region or None, config=Config(**options)
    )


def fetch_prefix(client: Any, source: ObjectSource, folder: Path, limit: int) -> int:
    objects = _guarded(source, lambda: list_objects(client, source))
    if not objects:
        raise FetchError(
            NOT_FOUND,
            f"nothing under {source.uri}: check the bucket and the prefix (the adapter's files "
            "go directly under it)",
        )
    require_adapter_config(objects, source.uri)
    if sum(objects.values()) > limit:
        raise too_large(source.uri, limit)
    budget = Budget(source.uri, limit)
    for name in objects:
        path = destination(folder, name, source.uri)
        _guarded(source, partial(_download, client, source, name, path, budget))
    return budget.used


def list_objects(client: Any, source: ObjectSource) -> dict[str, int]:
    """{name relative to the prefix: size} of every object under it, folder markers left out."""
    objects: dict[str, int] = {}
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=source.bucket, Prefix=source.prefix
    )
    for page in pages:
        for item in page.get("Contents", []):
            key: str = item["Key"]
            if not key.endswith("/"):
                objects[key[len(source.prefix) :]] = int(item.get("Size", 0))
    return objects


def _download(client: Any, source: ObjectSource, name: str, path: Path, budget: Budget) -> int:
    body = client.get_object(Bucket=source.bucket, Key=source.prefix + name)["Body"]
    try:
        return write(path, body, budget)
    finally:
        body.close()


def _guarded(source: ObjectSource, call: Callable[[], T]) -> T:
    """Runs one store call; what boto3 raises becomes a FetchError naming the source."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        CredentialRetrievalError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    try:
        return call()
    except ClientError as e:
        raise refusal(source, e.response) from None
    except (NoCredentialsError, PartialCredentialsError, CredentialRetrievalError) as e:
        raise FetchError(
            FORBIDDEN,
            f"no usable credentials to read {source.uri} ({e}): set {_CREDENTIALS[source.scheme]}",
        ) from None
    except BotoCoreError as e:
        raise FetchError(
            BAD_GATEWAY, f"the object store of {source.uri} did not answer: {e}"
        ) from None


def refusal(source: ObjectSource, response: dict[str, Any]) -> FetchError:
    """The FetchError for a store's error answer (botocore's ClientError.response)."""
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    said = f"{code or status}"
    if code == "NoSuchBucket":
        return FetchError(
            NOT_FOUND, f"no bucket {source.bucket!r} for {source.uri} ({said}): check the name"
        )
    if code in _DENIED or status in (401, 403):
        return FetchError(
            FORBIDDEN,
            f"the object store refused the credentials ({_CREDENTIALS[source.scheme]}) for "
            f"{source.uri} ({said}): check that they are right and may list and read it",
        )
    if code == "NoSuchKey" or status == 404:
        return FetchError(
            BAD_GATEWAY, f"{source.uri} changed while it was fetched ({said}): a retry may succeed"
        )
    return FetchError(
        BAD_GATEWAY, f"the object store answered {said} for {source.uri}: a retry may succeed"
    )
