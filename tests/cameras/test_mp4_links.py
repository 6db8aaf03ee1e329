"""A camera kept as mp4 shares the local source's files by hard links: a tool rewriting a source file in place
(``ffmpeg -y`` onto it, a move across filesystems onto it) changes the store's file too. A reader opening it finds
the change (size and modification time recorded when linked) and refuses it, naming the file and what changed,
instead of decoding another video's frames as the episode's; ``verify`` finds it by its content hash."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import lerobot_zarr as lz
from lerobot_zarr.errors import CorruptStoreError
from lerobot_zarr.testing.sample_data import write_sample_dataset

pytest.importorskip("av")
CAM = "observation.images.front"


@pytest.fixture
def linked(tmp_path):
    src = write_sample_dataset(tmp_path / "src", n_episodes=4, lengths=(10, 14), image_shape=(24, 32, 3),
                               video_keys=(CAM,), write_videos=True, episodes_per_file=2, seed=3)
    ds = lz.open_dataset(src, root=tmp_path / "store", storage={CAM: "mp4"}, progress=False)
    videos = sorted((ds.root / CAM / "videos").rglob("*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_nlink > 1 for v in videos)  # hard links of the source's files
    sources = sorted((src / "videos").rglob("*.mp4"))
    assert [os.path.samefile(a, b) for a, b in zip(videos, sources, strict=True)] == [True, True]
    return ds, sources


def test_a_source_mp4_rewritten_in_place_is_refused_at_open_naming_it(linked):
    ds, sources = linked
    before = ds.get_batch(np.arange(len(ds)))
    shutil.copyfile(sources[1], sources[0])  # another video written into the file (same inode): a rewrite in place
    fresh = lz.open_dataset(ds.root)
    with pytest.raises(CorruptStoreError, match=r"changed since the store linked it .*size") as caught:
        fresh.get_batch(np.arange(len(ds)))
    assert caught.value.path.endswith(sources[0].relative_to(sources[0].parents[3]).as_posix())
    assert caught.value.feature == CAM
    report = lz.verify(ds.root)  # (by content, as before)
    assert not report.ok and report.damaged[CAM]
    other = np.flatnonzero(before["episode_index"] >= 2)  # the episodes of the other file, untouched: still served
    np.testing.assert_array_equal(lz.open_dataset(ds.root).get_batch(other)[CAM], before[CAM][other])


def test_a_rewrite_of_the_same_size_is_found_by_its_time(linked):
    ds, sources = linked
    data = bytearray(sources[0].read_bytes())
    data[-100] ^= 0xFF
    stat = sources[0].stat()
    with open(sources[0], "r+b") as f:  # same size, other bytes
        f.write(data)
    os.utime(sources[0], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # (a clock of coarse granularity)
    assert sources[0].stat().st_size == stat.st_size
    with pytest.raises(CorruptStoreError, match="modified at"):
        lz.open_dataset(ds.root).get_batch(np.arange(3))
