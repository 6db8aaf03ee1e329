"""Copies between two filesystems (issue 29.1): ``os.copy_file_range`` raises EXDEV between filesystems (ENOSYS,
EOPNOTSUPP or EINVAL where a kernel or filesystem lacks it) instead of returning 0; every copy of the package then
goes on with reads and writes of the data ranges, so a sparse pack stays sparse.

Each path the issue names runs onto (or from) a folder on a real second filesystem made available by the test
(``other_fs``: a tmpfs such as /dev/shm, skipped where there is none): a writable copy of a cached store, a
transcode keeping the mp4 of a source on the other filesystem, ``to_lerobot`` onto it, and ``push`` with
``$TMPDIR`` on it. The copy itself is also checked with each errno injected.
"""

from __future__ import annotations

import errno
import filecmp
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import assert_same_frames, running_server, server_env

import lerobot_zarr as lz
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.utils import fileio

CAM = "observation.images.front"
TOKEN = "hf_write"


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def sparse_file(path: Path) -> Path:
    """64 MiB apparent, two data ranges of 5,000 bytes and 1 MiB, holes elsewhere (a partial pack)."""
    with open(path, "wb") as f:
        f.truncate(64 << 20)
        f.seek(20 << 20)
        f.write(b"x" * 5000)
        f.seek(40 << 20)
        f.write(os.urandom(1 << 20))
    return path


def mp4s(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.rglob("*.mp4"))}


@pytest.fixture(scope="module")
def video_source(tmp_path_factory) -> Path:
    pytest.importorskip("av")
    return write_sample_dataset(tmp_path_factory.mktemp("xfs_video") / "src", n_episodes=4, lengths=(6, 9),
                                state_dim=3, action_dim=3, image_shape=(12, 16, 3), video_keys=(CAM,),
                                write_videos=True, episodes_per_file=2, seed=7)


# ------------------------------------------------------------------------------------------------ the copy itself
@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL],
                         ids=["EXDEV", "ENOSYS", "EOPNOTSUPP", "EINVAL"])
def test_copy_goes_on_with_reads_and_writes_when_the_kernel_cannot_copy(tmp_path, monkeypatch, code):
    big = sparse_file(tmp_path / "sparse")
    calls = []

    def refuse(*args):
        calls.append(args)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "copy_file_range", refuse)
    fileio.copy_file(big, tmp_path / "copy")
    assert filecmp.cmp(big, tmp_path / "copy", shallow=False)
    assert allocated(tmp_path / "copy") <= allocated(big) + (64 << 10), "holes stay holes"
    assert len(calls) == 1, "one refusal is enough for the rest of the file"


def test_other_errors_of_the_kernel_copy_still_raise_and_leave_no_partial_file(tmp_path, monkeypatch):
    big = sparse_file(tmp_path / "sparse")
    monkeypatch.setattr(os, "copy_file_range", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError) as info:
        fileio.copy_file(big, tmp_path / "copy")
    assert info.value.errno == errno.EIO
    assert not (tmp_path / "copy").exists()


def test_copy_onto_another_filesystem_is_exact_and_sparse(tmp_path, other_fs):
    big = sparse_file(tmp_path / "sparse")
    fileio.copy_file(big, other_fs / "copy")
    assert filecmp.cmp(big, other_fs / "copy", shallow=False)
    assert allocated(other_fs / "copy") <= allocated(big) + (64 << 10), "holes stay holes on the other filesystem"
    fileio.copy_file(other_fs / "copy", tmp_path / "back")  # and back
    assert filecmp.cmp(big, tmp_path / "back", shallow=False)
    fileio.link_or_copy(big, other_fs / "linked")  # no hard link between filesystems: a copy
    assert os.stat(other_fs / "linked").st_nlink == 1 and filecmp.cmp(big, other_fs / "linked", shallow=False)


# ------------------------------------------------------------------------------------------------ the paths
def test_writable_copy_onto_another_filesystem(tmp_path, other_fs, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "cache"))
    src = write_sample_dataset(tmp_path / "src", n_episodes=6, lengths=(20, 40), episodes_per_file=3, seed=3)
    shared = lz.open_dataset(src, progress=False)
    mine = lz.open_dataset(src, root=other_fs / "mine", mode="r+", progress=False)
    assert os.stat(mine.root).st_dev != os.stat(shared.root).st_dev
    assert_same_frames(mine, shared, "a writable copy on another filesystem")
    with mine.edit(0, frames=(0, 3)) as ep:
        ep["action"][:] = 7.0
    mine.close()
    assert lz.verify(other_fs / "mine", progress=False).ok
    again = lz.open_dataset(other_fs / "mine")
    assert np.all(again[0]["action"] == 7.0) and not np.all(shared[0]["action"] == 7.0)


def test_transcode_keeping_the_mp4_of_a_source_on_another_filesystem(video_source, tmp_path, other_fs):
    import shutil

    src = Path(shutil.copytree(video_source, other_fs / "src"))
    ds = lz.open_dataset(src, root=tmp_path / "store", storage={CAM: "mp4"}, progress=False)
    assert ds.array_specs[CAM].storage == "mp4"
    assert mp4s(ds.root / CAM / "videos") == mp4s(src / "videos"), "the source's mp4 files, byte for byte"
    assert lz.verify(ds.root, progress=False).ok
    plain = lz.open_dataset(video_source, root=tmp_path / "plain", progress=False)
    assert_same_frames(ds, plain, "mp4 kept from another filesystem vs decoded")


def test_to_lerobot_onto_another_filesystem(video_source, tmp_path, other_fs):
    ds = lz.open_dataset(video_source, root=tmp_path / "store", storage={CAM: "mp4"}, progress=False)
    out = ds.to_lerobot(other_fs / "export", progress=False)
    assert mp4s(out / "videos") == mp4s(video_source / "videos")
    assert_same_frames(lz.open_dataset(out, root=tmp_path / "again", progress=False), ds, "export on another fs")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from running_server(HubServer(tmp_path_factory.mktemp("xfs_hub") / "storage", tokens={TOKEN: "alice"}))


@pytest.fixture
def env(monkeypatch, tmp_path, hub):
    yield from server_env(monkeypatch, tmp_path, hub)


def test_push_with_tmpdir_on_another_filesystem_than_the_store(video_source, hub, env, tmp_path, other_fs,
                                                               monkeypatch):
    ds = lz.open_dataset(video_source, root=tmp_path / "store", storage={CAM: "mp4"}, progress=False)
    monkeypatch.setenv("TMPDIR", str(other_fs))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
    assert Path(tempfile.gettempdir()) == other_fs
    sha = ds.push("alice/xfs", token=TOKEN, progress=False)
    assert hub.refs("alice/xfs")["branches"]["main"] == sha
    remote = {Path(p).name: hub.get_file("alice/xfs", p) for p in hub.list_files("alice/xfs") if p.endswith(".mp4")}
    assert remote == mp4s(video_source / "videos")
    assert not any(other_fs.iterdir()), "the push's temporary export was removed"
