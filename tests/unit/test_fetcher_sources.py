"""What the adapter fetcher takes as a source and a revision, checked before anything is dialled,
and where a fetched adapter lives (the path the operator computes without asking)."""

from __future__ import annotations

import pytest

from llmfleet.fetcher.errors import FetchError
from llmfleet.fetcher.paths import FETCH_ROOT, fetched_path, needs_fetch
from llmfleet.fetcher.sources import HubSource, ObjectSource, parse, relative_parts


@pytest.mark.parametrize(
    ("source", "revision", "parsed"),
    [
        ("s3://bucket/adapters/x", None, ObjectSource("s3", "bucket", "adapters/x/")),
        ("s3://bucket/adapters/x/", None, ObjectSource("s3", "bucket", "adapters/x/")),
        ("gs://my.bucket/a", None, ObjectSource("gs", "my.bucket", "a/")),
        ("s3://bucket", None, ObjectSource("s3", "bucket", "")),
        ("acme/sql-lora", "v1.0", HubSource("acme/sql-lora", "v1.0")),
        ("acme/sql-lora", "refs/pr/1", HubSource("acme/sql-lora", "refs/pr/1")),
        ("gpt2-lora", "0e9e39f249a16976918f6564b8830bc894c89659", None),
    ],
)
def test_a_valid_source_parses(
    source: str, revision: str | None, parsed: ObjectSource | HubSource | None
) -> None:
    result = parse(source, revision)
    if parsed is not None:
        assert result == parsed
    assert isinstance(result, HubSource) == (revision is not None)


@pytest.mark.parametrize(
    ("source", "revision", "says"),
    [
        pytest.param("/models/lora", None, "local path", id="a-local-path"),
        pytest.param("./lora", "v1", "local path", id="a-relative-path"),
        pytest.param("https://example.com/lora", "v1", "another scheme", id="a-url"),
        pytest.param("acme/sql-lora", None, "without a revision", id="a-hub-repo-at-main"),
        pytest.param("acme/sql-lora", "", "not a branch", id="an-empty-revision"),
        pytest.param("acme/sql-lora", "a b", "not a branch", id="a-revision-with-a-space"),
        pytest.param("acme/sql/lora", "v1", "not a Hugging Face repo", id="three-segments"),
        pytest.param("acme/../lora", "v1", "not a Hugging Face repo", id="dot-dot-repo"),
        pytest.param("s3://bucket/x", "v1", "only to Hugging Face", id="an-object-with-a-revision"),
        pytest.param("s3://Bad_Bucket!/x", None, "not a bucket name", id="a-bad-bucket"),
        pytest.param("s3:///x", None, "not a bucket name", id="no-bucket"),
        pytest.param("s3://bucket/a/../b", None, "'..'", id="dot-dot-prefix"),
        pytest.param("", None, "non-empty string", id="empty"),
        pytest.param(42, None, "non-empty string", id="not-a-string"),
        pytest.param("acme/lora", 3, "string or null", id="a-numeric-revision"),
    ],
)
def test_a_malformed_request_is_refused_400_naming_what_is_wrong(
    source: object, revision: object, says: str
) -> None:
    with pytest.raises(FetchError) as refused:
        parse(source, revision)
    assert refused.value.status == 400
    assert says in refused.value.message
    if isinstance(source, str) and source:
        assert source in refused.value.message


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("adapter_config.json", ("adapter_config.json",)),
        ("sub/dir/file.bin", ("sub", "dir", "file.bin")),
        ("../escape", None),
        ("a/../../escape", None),
        ("/etc/passwd", None),
        ("a//b", None),
        ("./a", None),
        ("", None),
    ],
)
def test_only_plain_relative_names_land_below_the_adapter_folder(
    name: str, parts: tuple[str, ...] | None
) -> None:
    assert relative_parts(name) == parts


def test_the_fetched_path_is_a_digest_folder_under_the_root_per_source_and_revision() -> None:
    a = fetched_path("acme/lora", "v1")
    assert a.startswith(f"{FETCH_ROOT}/")
    assert a == fetched_path("acme/lora", "v1")
    assert len({a, fetched_path("acme/lora", "v2"), fetched_path("acme/lora", None)}) == 3
    assert fetched_path("s3://b/x", None, "/tmp/root/") == fetched_path(
        "s3://b/x", None, "/tmp/root"
    )


@pytest.mark.parametrize(
    ("source", "revision", "fetched"),
    [
        ("s3://b/x", None, True),
        ("gs://b/x", None, True),
        ("acme/lora", "v1", True),
        ("acme/lora", None, False),
        ("/models/lora", None, False),
    ],
)
def test_only_object_stores_and_hub_revisions_need_the_fetcher(
    source: str, revision: str | None, fetched: bool
) -> None:
    assert needs_fetch(source, revision) is fetched
