"""The adapter folders under the fetcher's root: in place whole or not at all, fetched once per
source and revision however many ask at once, and pruned to what the operator keeps, never
under a fetch in flight. The downloads here are fakes; the stores' own are tested beside."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import pytest

from llmfleet.fetcher.errors import FetchError, too_large
from llmfleet.fetcher.paths import fetched_path
from llmfleet.fetcher.sources import HubSource, ObjectSource
from llmfleet.fetcher.store import TMP_PREFIX, AdapterStore, Limits

SOURCE = "s3://bucket/adapters/x"
FILES = {"adapter_config.json": b'{"r": 8}', "adapter_model.safetensors": b"\x00" * 1000}


def writes(
    files: dict[str, bytes], then: Callable[[], None] = lambda: None
) -> tuple[Callable[[ObjectSource | HubSource, Path, int], int], list[Path]]:
    """A download that writes `files` into its folder, then runs `then`; and the folders it
    was given, one per call."""
    calls: list[Path] = []

    def download(_source: ObjectSource | HubSource, folder: Path, _limit: int) -> int:
        calls.append(folder)
        for name, body in files.items():
            (folder / name).write_bytes(body)
        then()
        return sum(map(len, files.values()))

    return download, calls


def entries(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_a_fetch_renames_the_complete_folder_into_place(tmp_path: Path) -> None:
    download, calls = writes(FILES)
    store = AdapterStore(tmp_path, download)

    path = store.fetch(SOURCE, None)

    assert path == fetched_path(SOURCE, None, str(tmp_path))
    assert {p.name: p.read_bytes() for p in Path(path).iterdir()} == FILES
    assert calls[0].name.startswith(f"{TMP_PREFIX}{Path(path).name}-")
    assert entries(tmp_path) == [Path(path).name]


def fail(error: BaseException) -> Callable[[], None]:
    def raise_it() -> None:
        raise error

    return raise_it


@pytest.mark.parametrize(
    ("files", "then", "status"),
    [
        pytest.param(FILES, fail(FetchError(502, "the store went away")), 502, id="store-fails"),
        pytest.param(FILES, fail(OSError(28, "No space left on device")), 507, id="disk-full"),
        pytest.param(FILES, fail(RuntimeError("a bug")), 500, id="unexpected"),
        pytest.param({"weights.bin": b"x"}, lambda: None, 422, id="no-adapter-config"),
    ],
)
def test_a_failed_fetch_leaves_no_folder_behind(
    tmp_path: Path, files: dict[str, bytes], then: Callable[[], None], status: int
) -> None:
    store = AdapterStore(tmp_path, writes(files, then)[0])

    with pytest.raises(FetchError) as failed:
        store.fetch(SOURCE, None)

    assert failed.value.status == status
    assert SOURCE in failed.value.message or status == 502
    assert entries(tmp_path) == []


def test_a_fetched_adapter_is_answered_at_once_without_a_second_download(tmp_path: Path) -> None:
    download, calls = writes(FILES)
    store = AdapterStore(tmp_path, download)

    first = store.fetch(SOURCE, None)
    again = AdapterStore(tmp_path, download).fetch(SOURCE, None)  # a restarted fetcher too

    assert first == again == store.fetch(SOURCE, None)
    assert len(calls) == 1


def fetch_at_once(
    store: AdapterStore, calls: list[Path], release: threading.Event, requests: int
) -> list[Future[str]]:
    """`requests` fetches of SOURCE at once, the download held until every one has asked."""
    asked = threading.Semaphore(0)

    def ask() -> str:
        asked.release()
        return store.fetch(SOURCE, None)

    with ThreadPoolExecutor(requests) as pool:
        answers = [pool.submit(ask) for _ in range(requests)]
        for _ in range(requests):
            assert asked.acquire(timeout=10)
        while not calls:
            time.sleep(0.01)
        time.sleep(0.05)  # the last to ask reaches the wait for the one fetch
        release.set()
        wait(answers, timeout=10)
    return answers


def test_concurrent_requests_for_one_adapter_download_it_once(tmp_path: Path) -> None:
    release = threading.Event()
    download, calls = writes(FILES, then=lambda: release.wait(10) or None)
    store = AdapterStore(tmp_path, download)

    answers = fetch_at_once(store, calls, release, 5)

    assert {a.result() for a in answers} == {fetched_path(SOURCE, None, str(tmp_path))}
    assert len(calls) == 1


def test_concurrent_requests_share_the_one_fetch_failure_and_a_later_one_tries_again(
    tmp_path: Path,
) -> None:
    release = threading.Event()

    def refuse() -> None:
        release.wait(10)
        raise FetchError(403, "refused")

    download, calls = writes(FILES, then=refuse)
    store = AdapterStore(tmp_path, download)

    answers = fetch_at_once(store, calls, release, 3)

    assert [getattr(a.exception(), "status", None) for a in answers] == [403, 403, 403]
    assert len(calls) == 1
    with pytest.raises(FetchError):
        store.fetch(SOURCE, None)
    assert len(calls) == 2


def test_different_revisions_are_different_folders(tmp_path: Path) -> None:
    download, calls = writes(FILES)
    store = AdapterStore(tmp_path, download)

    assert store.fetch("acme/lora", "v1") != store.fetch("acme/lora", "v2")
    assert len(calls) == 2


def test_prune_removes_every_fetched_folder_but_those_kept(tmp_path: Path) -> None:
    store = AdapterStore(tmp_path, writes(FILES)[0])
    a, b, c = (store.fetch(f"s3://bucket/{n}", None) for n in "abc")
    (tmp_path / "not-an-adapter").mkdir()  # anything else in --dir is not the fetcher's

    removed = store.prune([a, c, "/elsewhere/0123456789abcdef01234567"])

    assert removed == [b]
    assert entries(tmp_path) == sorted([Path(a).name, Path(c).name, "not-an-adapter"])
    assert store.prune([]) == sorted([a, c])


def test_prune_spares_the_folder_of_a_fetch_in_flight_and_removes_stale_ones(
    tmp_path: Path,
) -> None:
    stale = tmp_path / f"{TMP_PREFIX}0123456789abcdef01234567-dead"
    stale.mkdir(parents=True)
    release, pruned = threading.Event(), []
    store = AdapterStore(tmp_path, writes(FILES, then=lambda: release.wait(10) or None)[0])

    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(store.fetch, SOURCE, None)
        while not any(p.name.startswith(TMP_PREFIX) and p != stale for p in tmp_path.iterdir()):
            time.sleep(0.01)
        pruned = store.prune([])
        release.set()
        path = answer.result(timeout=10)

    assert pruned == [str(stale)]
    assert sorted(p.name for p in Path(path).iterdir()) == sorted(FILES)


def test_start_removes_what_a_killed_fetcher_left_half_done(tmp_path: Path) -> None:
    (tmp_path / f"{TMP_PREFIX}0123456789abcdef01234567-dead" / "sub").mkdir(parents=True)
    done = tmp_path / "0123456789abcdef01234567"
    done.mkdir()

    AdapterStore(tmp_path, writes(FILES)[0]).start()

    assert entries(tmp_path) == [done.name]


def test_a_malformed_request_downloads_nothing(tmp_path: Path) -> None:
    download, calls = writes(FILES)

    with pytest.raises(FetchError) as refused:
        AdapterStore(tmp_path, download).fetch("/local/path", None)

    assert refused.value.status == 400
    assert calls == []


def capped(files: dict[str, bytes]) -> Callable[[ObjectSource | HubSource, Path, int], int]:
    """A download that, like the stores' own, refuses to write more than its limit."""
    size = sum(map(len, files.values()))

    def download(source: ObjectSource | HubSource, folder: Path, limit: int) -> int:
        if size > limit:
            raise too_large(str(source), limit)
        return writes(files)[0](source, folder, limit)

    return download


def test_a_fetch_beyond_the_cap_on_count_is_refused_naming_it(tmp_path: Path) -> None:
    store = AdapterStore(tmp_path, capped(FILES), Limits(1 << 20, max_adapters=2))
    kept = [store.fetch(f"s3://bucket/{n}", None) for n in "ab"]

    with pytest.raises(FetchError) as refused:
        store.fetch("s3://bucket/c", None)

    assert refused.value.status == 507
    assert "at most 2 fetched adapters" in refused.value.message
    assert "maxCpuAdapters" in refused.value.message
    assert len(entries(tmp_path)) == 2  # nothing of c written
    store.prune(kept[:1])
    assert Path(store.fetch("s3://bucket/c", None)).is_dir()  # room again once one is pruned


def test_a_fetch_beyond_the_cap_on_bytes_is_refused_naming_it(tmp_path: Path) -> None:
    size = sum(map(len, FILES.values()))
    limits = Limits(max_bytes=10 * size, max_total_bytes=2 * size + size // 2)
    store = AdapterStore(tmp_path, capped(FILES), limits)
    store.fetch("s3://bucket/a", None)
    store.fetch("s3://bucket/b", None)

    with pytest.raises(FetchError) as refused:
        store.fetch("s3://bucket/c", None)

    assert refused.value.status == 507
    assert f"at most {limits.max_total_bytes} bytes" in refused.value.message
    assert "s3://bucket/c" in refused.value.message
    assert len(entries(tmp_path)) == 2  # the partial copy is gone too


def test_an_adapter_larger_than_the_per_adapter_limit_is_still_413(tmp_path: Path) -> None:
    size = sum(map(len, FILES.values()))
    store = AdapterStore(tmp_path, capped(FILES), Limits(size - 1, 4, 100 * size))

    with pytest.raises(FetchError) as refused:
        store.fetch("s3://bucket/a", None)

    assert refused.value.status == 413
