"""A built image is unpacked once on this machine, whichever lab runs it first
(dev/localcluster/noderunner/unpack.py): every other lab, `make test`'s workers among them, gets
the same root filesystem as hard links in its own state directory, which pruning the shared
cache does not take away."""

from __future__ import annotations

from pathlib import Path

import pytest
from localcluster.noderunner import unpack
from localcluster.noderunner.images import Image


@pytest.fixture
def unpacks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What umoci would write for each image (a root filesystem with one file naming it); the
    digests it was asked to unpack, in order."""
    made: list[str] = []

    def fake_unpack(image: Image, cache: Path, target: Path) -> None:
        made.append(image.digest)
        (target / "rootfs").mkdir(parents=True)
        (target / "rootfs" / "which").write_text(image.digest)
        (target / "image-config.json").write_text("{}")

    monkeypatch.setattr(unpack, "_unpack", fake_unpack)
    return made


def image(n: int) -> Image:
    return Image(ref=f"x:{n}", archive=Path("/nonexistent.oci.tar"), digest=f"sha256:{n:064x}")


def test_labs_share_one_unpack_and_each_keeps_its_own_links(
    tmp_path: Path, unpacks: list[str]
) -> None:
    shared = tmp_path / "shared"
    labs = [unpack.Unpacked(tmp_path / f"lab{i}" / "images", shared=shared) for i in range(3)]
    roots = [lab.get(image(1)) for lab in labs]
    assert unpacks == [image(1).digest]
    assert [r.parent for r in roots] == [lab.cache for lab in labs]
    files = [r / "rootfs" / "which" for r in roots]
    assert {f.read_text() for f in files} == {image(1).digest}
    assert len({f.stat().st_ino for f in files}) == 1  # links, not copies
    assert labs[0].get(image(1)) == roots[0]  # asked again: no second unpack
    assert unpacks == [image(1).digest]


def test_the_shared_cache_keeps_the_images_used_last_and_labs_keep_theirs(
    tmp_path: Path, unpacks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(unpack, "SHARED_KEEP", 2)
    shared = tmp_path / "shared"
    lab = unpack.Unpacked(tmp_path / "lab" / "images", shared=shared)
    first = lab.get(image(1))
    for n in (2, 3):
        lab.get(image(n))
    kept = sorted(p.name for p in shared.iterdir() if not p.name.startswith("."))
    assert kept == [image(n).digest.replace(":", "_") for n in (2, 3)]
    assert (first / "rootfs" / "which").read_text() == image(1).digest  # pruned, still here
    other = unpack.Unpacked(tmp_path / "other" / "images", shared=shared)
    other.get(image(1))
    assert unpacks == [image(n).digest for n in (1, 2, 3, 1)]


def test_without_a_shared_cache_a_lab_unpacks_for_itself(
    tmp_path: Path, unpacks: list[str]
) -> None:
    lab = unpack.Unpacked(tmp_path / "images")
    root = lab.get(image(1))
    assert root == tmp_path / "images" / image(1).digest.replace(":", "_")
    assert (root / "rootfs" / "which").read_text() == image(1).digest
    assert unpacks == [image(1).digest]
