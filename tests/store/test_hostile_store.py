"""Stores from elsewhere are untrusted input: each attack of issue 20 (items 1-8), done by hand to the files, ends
in a typed error naming the file (or a correct answer), never a wrong value, a write outside the store, an outside
file published, or an allocation the data does not justify. Each test failed before its fix.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lerobot_zarr as lz
from lerobot_zarr.errors import (
    ArgumentError,
    CorruptSourceError,
    CorruptStoreError,
    DeltaTimestampsError,
    HubError,
    LeRobotZarrError,
    SchemaMismatchError,
    SourceMismatchError,
)
from lerobot_zarr.store.state import chunk_path, read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset

MAIN = Path(__file__).resolve().parents[2]
FEATURES = {"x": {"dtype": "float32", "shape": [3], "names": None},
            "cam": {"dtype": "image", "shape": [6, 8, 3], "names": None}}
IMG, CAM = "observation.images.wrist", "observation.images.front"


def writer_store(root: Path, n: int = 5, **kwargs) -> lz.WritableDataset:
    ds = lz.create(root, fps=10, features=FEATURES, durable=False, **kwargs)
    rng = np.random.default_rng(1)
    for k in range(n):
        ds.add_episode({"x": rng.random((4 + k, 3), dtype=np.float32),
                        "cam": rng.integers(0, 255, (4 + k, 6, 8, 3), dtype=np.uint8)}, task=f"t{k}")
    return ds


def edit_root(root: Path, fn) -> None:
    doc = json.loads((root / "zarr.json").read_bytes())
    fn(doc["attributes"]["lerobot_zarr"])
    (root / "zarr.json").write_text(json.dumps(doc))


def column(values) -> str:
    diffs = np.diff(np.asarray(values, dtype=np.int64), prepend=np.int64(0)).astype("<i8")
    return base64.b64encode(zlib.compress(diffs.tobytes())).decode()


def decode(text: str) -> np.ndarray:
    return np.cumsum(np.frombuffer(zlib.decompress(base64.b64decode(text)), "<i8"))


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return write_sample_dataset(tmp_path_factory.mktemp("hostile") / "src", n_episodes=5, lengths=(6, 10),
                                state_dim=3, action_dim=3, image_keys=(IMG,), image_shape=(8, 10, 3),
                                episodes_per_file=3, seed=9)


# ------------------------------------------------------------------------------------------------ 1. shard index
def test_1_swapped_compact_index_rows_are_refused_not_served(source, tmp_path):
    ds = lz.open_dataset(source, root=tmp_path / "s", storage={IMG: "lossless"}, progress=False)
    state = read_state(ds.root)
    rows = int(state.packs.rows[0])
    path = Path(chunk_path(ds.root, IMG, 0, 4))
    data = bytearray(path.read_bytes())
    index = np.frombuffer(bytes(data[:16 * rows]), "<u8").reshape(rows, 2).copy()
    index[[0, 1]] = index[[1, 0]]  # frame 1 where frame 0 was; the crc32c after the index left as it was
    data[:16 * rows] = index.tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStoreError, match="crc32c"):
        lz.open_dataset(ds.root)[0]


# ------------------------------------------------------------------------------------------------ 2. bombs
def test_2_a_decompression_bomb_in_the_root_is_refused_before_it_inflates(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    bomb = base64.b64encode(zlib.compress(bytes(128 << 20), 9)).decode()  # 128 MiB of zeros, ~170 KB
    saved = (ds.root / "zarr.json").read_bytes()
    for key in ("length", "chunk"):
        (ds.root / "zarr.json").write_bytes(saved)
        edit_root(ds.root, lambda a: a["episodes"].__setitem__(key, bomb))
        tracemalloc.start()
        try:
            with pytest.raises(CorruptStoreError, match=f"episodes.{key}.*more than"):
                read_state(ds.root)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 32 << 20, f"{peak} bytes allocated to refuse a {len(bomb)}-character column"


def test_2_nesting_bombs_are_typed_errors(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    (ds.root / "zarr.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CorruptStoreError, match="zarr.json"):
        read_state(ds.root)
    nested = {"a": None}
    for _ in range(100):
        nested = {"a": nested}
    (ds.root / "zarr.json").write_text(json.dumps({"attributes": {"lerobot_zarr": nested}}))
    with pytest.raises(CorruptStoreError, match="nested deeper"):
        read_state(ds.root)


class HubFilesLike:
    """What ``hub_index.read_index`` asks of a Hub repo's files: their sizes (from the tree listing), whether
    the index describes them, and the index file's bytes."""

    def __init__(self, sizes: dict[str, int], read):
        self.sizes, self._read = sizes, read

    def matches(self, rel, ids):
        return True

    def exists(self, rel):
        return rel in self.sizes

    def location(self, rel=""):
        return f"org/x/{rel}"

    def read_bytes(self, rel):
        return self._read()


def test_2_nesting_bombs_from_the_hub_are_typed_errors(monkeypatch):
    from lerobot_zarr.hub import http as hub
    from lerobot_zarr.lerobot import index_file as hub_index

    monkeypatch.setattr(hub, "request", lambda *a, **k: (None, b"[" * 100_000 + b"]" * 100_000))
    with pytest.raises(HubError, match="invalid JSON"):
        hub.request_json("http://127.0.0.1:1/api/x", hub.Where("org/x"))

    files = HubFilesLike({hub_index.INDEX_FILE: 200_002, "data/x.parquet": 10 << 20},
                         lambda: b"[" * 100_001 + b"]" * 100_001)  # the repo's index file is a nesting bomb
    with pytest.raises(CorruptSourceError, match="invalid JSON"):
        hub_index.read_index(files)


def test_8_an_index_file_larger_than_what_it_describes_is_not_read():
    from lerobot_zarr.lerobot import index_file as hub_index

    def download():
        raise AssertionError("a 300 MiB index was downloaded before any check")

    files = HubFilesLike({hub_index.INDEX_FILE: 300 << 20, "data/x.parquet": 1 << 20, "meta/info.json": 2000},
                         download)
    assert hub_index.read_index(files) is None


# ------------------------------------------------------------------------------------------------ 3. shifts
def test_3_index_shifts_are_checked_against_the_stored_numbers(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.delete_episodes([0])  # later episodes keep their stored numbers; the table's shifts correct them
    want = ds.get_batch(np.arange(len(ds)))
    ds.close()
    assert (want["index"] >= 0).all() and want["index"][0] == 0
    saved = (ds.root / "zarr.json").read_bytes()
    edit_root(ds.root, lambda a: a["episodes"].__setitem__("index_shift", column([2**62] * 4)))
    with pytest.raises(CorruptStoreError, match="index_shift"):
        lz.open_dataset(ds.root)
    (ds.root / "zarr.json").write_bytes(saved)
    edit_root(ds.root, lambda a: a["episodes"].__setitem__("index_shift",
                                                           column(decode(a["episodes"]["index_shift"]) + 50)))
    bad = lz.open_dataset(ds.root)
    with pytest.raises(CorruptStoreError, match="shifts disagree"):
        bad.get_batch(np.arange(len(bad)))
    with pytest.raises(CorruptStoreError, match="shifts disagree"):
        lz.open_dataset(ds.root)[3]
    with pytest.raises(CorruptStoreError, match="shifts disagree"):
        lz.open_dataset(ds.root).episode(1)


def test_3_offsets_and_starts_are_checked(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    saved = (ds.root / "zarr.json").read_bytes()
    for key, values, match in (("offset", [0, 4, 9, 15, 2**63 - 4], "offset"),
                               ("start", [0, 4, 9, 15, 100], "episodes.start"),
                               ("start", [1, 5, 10, 16, 23], "episodes.start")):
        (ds.root / "zarr.json").write_bytes(saved)
        edit_root(ds.root, lambda a: a["episodes"].__setitem__(key, column(values)))
        with pytest.raises(CorruptStoreError, match=match):
            lz.open_dataset(ds.root)


# ------------------------------------------------------------------------------------------------ 4. links
@pytest.mark.parametrize("link", ["x", "x/c", "cam/c", "cam/c/0", "cam/c/0/0", ".episode_stats", "frame_live"])
def test_4_a_symlinked_folder_points_no_read_or_write_outside_the_store(tmp_path, link):
    ds = writer_store(tmp_path / "s", pack_bytes=6 * 8 * 3 * 12)
    ds.close()
    root = ds.root
    outside = tmp_path / "outside"
    shutil.move(root / link, outside)  # the link points at real store content: a read through it would work
    (root / link).symlink_to(outside, target_is_directory=True)
    before = tree(outside)
    with pytest.raises(CorruptStoreError, match="symbolic link"):
        with lz.open_dataset(root, mode="r+") as w:
            w.add_episode({"x": np.ones((30, 3), np.float32), "cam": np.ones((30, 6, 8, 3), np.uint8)}, task="t")
            w.delete_episodes([0, 1, 2])
    if link not in (".episode_stats", "frame_live"):  # files lerobot_zarr's readers never open
        with pytest.raises(CorruptStoreError, match="symbolic link"):
            r = lz.open_dataset(root)
            r.get_batch(np.arange(len(r)))
    assert tree(outside) == before, "a file outside the store was written, moved or deleted"
    report = lz.verify(root, progress=False)
    assert any("symbolic link" in p for p in report.store_problems)


def test_4_a_link_in_place_of_the_store_root_file_is_refused(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    shutil.move(ds.root / "zarr.json", tmp_path / "root.json")
    (ds.root / "zarr.json").symlink_to(tmp_path / "root.json")
    with pytest.raises(CorruptStoreError, match="symbolic link"):
        read_state(ds.root)


# ------------------------------------------------------------------------------------------------ 5. published
@pytest.fixture(scope="module")
def mp4_store(tmp_path_factory) -> Path:
    pytest.importorskip("av")
    work = tmp_path_factory.mktemp("hostile_mp4")
    src = write_sample_dataset(work / "src", n_episodes=2, lengths=(5, 6), state_dim=2, action_dim=2,
                               image_shape=(16, 16, 3), video_keys=(CAM,), write_videos=True, seed=2)
    return lz.open_dataset(src, root=work / "store", storage={CAM: "mp4"}, progress=False).root


@pytest.mark.parametrize("what", ["file", "videos folder"])
def test_5_an_outside_file_linked_in_as_an_mp4_is_never_published(mp4_store, tmp_path, what):
    root = tmp_path / "store"
    shutil.copytree(mp4_store, root)
    videos = root / CAM / "videos"
    secret = tmp_path / "secret"
    secret.mkdir()
    mp4 = next(p for p in videos.rglob("*.mp4"))
    if what == "file":
        (secret / "key.mp4").write_bytes(b"SECRET" * 100)
        mp4.unlink()
        mp4.symlink_to(secret / "key.mp4")
    else:
        shutil.move(videos, secret / "videos")
        videos.symlink_to(secret / "videos", target_is_directory=True)
    out = tmp_path / "export"
    with pytest.raises(CorruptStoreError, match="symbolic link"):
        lz.open_dataset(root).to_lerobot(out, progress=False)
    assert not out.exists()
    with pytest.raises(CorruptStoreError, match="symbolic link"):
        lz.open_dataset(root)[0]


# ------------------------------------------------------------------------------------------------ 6. stats
KILL_AFTER_STATS_FILES = textwrap.dedent("""
    import os, sys
    import lerobot_zarr as lz
    from lerobot_zarr.writing import transaction
    fold = transaction.WriteTransaction._fold_dirty
    def fold_then_die(self, *args):
        out = fold(self, *args)  # the edited episode's new stats file is written...
        os._exit(3)  # ...and the writer is killed before its commit
    transaction.WriteTransaction._fold_dirty = fold_then_die
    ds = lz.open_dataset(sys.argv[1], mode="r+")
    with ds.edit(1) as ep:
        ep["x"][:] = 1000.0
    ds.flush()
""")


def test_6_stats_are_right_after_a_kill_once_the_edited_stats_file_is_written(tmp_path):
    writer_store(tmp_path / "s").close()
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_STATS_FILES, str(tmp_path / "s")], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(MAIN)), timeout=120)
    assert proc.returncode == 3, proc.stderr
    lz.open_dataset(tmp_path / "s", mode="r+").close()  # the next writer
    ds = lz.open_dataset(tmp_path / "s")
    x = ds.get_batch(np.arange(len(ds)))["x"]
    assert x.max() == 1000.0
    np.testing.assert_allclose(ds.meta.stats["x"]["max"], x.max(axis=0))
    np.testing.assert_allclose(ds.meta.stats["x"]["mean"], x.mean(axis=0), rtol=1e-6)


# ------------------------------------------------------------------------------------------------ 7. sparse
def apparent(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def allocated(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_7_cameras_no_episode_has_get_no_pack_files(tmp_path):
    from hub_fixtures import real_dataset

    src = real_dataset("record-test")  # two AV1 cameras listed, their videos absent
    with pytest.warns(lz.LeRobotZarrWarning):
        ds = lz.open_dataset(src, root=tmp_path / "s", progress=False)
    assert apparent(ds.root) < 4 << 20, f"{apparent(ds.root)} bytes apparent (sparse camera packs?)"
    for cam in ("observation.images.front", "observation.images.top"):
        assert not (ds.root / cam / "c").exists() or not any((ds.root / cam / "c").rglob("*"))
    assert lz.verify(ds.root, progress=False).ok


def test_7_copies_of_packs_stay_sparse(source, tmp_path, monkeypatch):
    lz.open_dataset(source, episodes=[0], root=tmp_path / "base", progress=False)  # a partial store: sparse packs
    lz.open_dataset(source, root=tmp_path / "base", progress=False)
    from lerobot_zarr.utils import fileio as _fileio

    big = tmp_path / "sparse"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
        f.seek(20 << 20)
        f.write(b"x" * 5000)
    _fileio.copy_file(big, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == big.read_bytes()
    assert os.stat(tmp_path / "copy").st_blocks * 512 <= os.stat(big).st_blocks * 512 + (64 << 10)
    # a writable copy of the cached store on another filesystem (no hard links): copied, holes kept
    ds = lz.create(tmp_path / "rec", fps=10, features=FEATURES, durable=False)
    ds.add_episode({"x": np.ones((3, 3), np.float32), "cam": np.ones((3, 6, 8, 3), np.uint8)}, task="t")
    ds.close()
    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EXDEV, "cross-device")))
    from lerobot_zarr.writing.forks import fork

    fork(tmp_path / "rec", tmp_path / "forked")
    assert allocated(tmp_path / "forked") < apparent(tmp_path / "forked") / 4
    assert allocated(tmp_path / "forked") <= allocated(tmp_path / "rec") + (256 << 10)
    assert lz.verify(tmp_path / "forked", progress=False).ok


# ------------------------------------------------------------------------------------------------ 8. the rest
def test_8_a_bad_codec_in_the_root_is_a_corrupt_store_naming_the_root(source, tmp_path):
    ds = lz.open_dataset(source, root=tmp_path / "s", storage={IMG: "lossless"}, progress=False)
    for codec in ({"codec": "zstd", "level": 99}, {"codec": "nope"}, {"codec": "jpeg", "quality": "x"}):
        edit_root(ds.root, lambda a: a["features"][IMG].__setitem__("codec", codec))
        with pytest.raises(CorruptStoreError, match="zarr.json.*codec"):
            lz.open_dataset(ds.root)


def test_8_a_camera_of_impossible_channels_is_a_corrupt_store(source, tmp_path):
    """Found by the store fuzz: a camera's frame_shape with 7 channels reached the mp4 reader as a ValueError."""
    ds = lz.open_dataset(source, root=tmp_path / "s", progress=False)
    edit_root(ds.root, lambda a: a["features"][IMG].__setitem__("frame_shape", [8, 10, 7]))
    with pytest.raises(CorruptStoreError, match="zarr.json.*channels"):
        lz.open_dataset(ds.root)


@pytest.mark.parametrize("value", [["timestamp", "nope"], "x", [3]], ids=["unknown", "not-a-list", "number"])
def test_8_stats_on_demand_naming_no_numeric_feature_is_a_corrupt_store(tmp_path, value):
    """The root's ``stats_on_demand`` (features whose stats readers compute when asked) names numeric features and
    uint8 cameras of the store only; ``create`` refuses others before it makes anything."""
    writer_store(tmp_path / "s", n=1, stats_on_demand=["x"]).close()
    assert lz.open_dataset(tmp_path / "s").meta.stats["x"]["count"] == [4]
    edit_root(tmp_path / "s", lambda a: a.__setitem__("stats_on_demand", value))
    with pytest.raises(CorruptStoreError, match="stats_on_demand"):
        lz.open_dataset(tmp_path / "s")
    for names in (["nope"],):
        with pytest.raises(ArgumentError, match="stats_on_demand"):
            lz.create(tmp_path / "new", fps=10, features=FEATURES, stats_on_demand=names)
        assert not (tmp_path / "new").exists()


def test_8_huge_declared_sizes_allocate_nothing_and_leave_no_half_made_store(source, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(source, src)
    path = next((src / "meta" / "episodes").rglob("*.parquet"))
    table = pq.read_table(path)
    length = table.column("length").to_numpy().copy()
    length[-1] = 10**12  # the last episode claims a trillion frames
    end = np.cumsum(length)
    table = table.set_column(table.schema.get_field_index("length"), "length", pa.array(length))
    table = table.set_column(table.schema.get_field_index("dataset_to_index"), "dataset_to_index", pa.array(end))
    pq.write_table(table, path)
    info = json.loads((src / "meta" / "info.json").read_text())
    info["total_frames"] = int(end[-1])
    (src / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(SchemaMismatchError, match="episode 4 .*1000000000000 frames"):
        lz.open_dataset(src, root=tmp_path / "s", episodes=[0, 1], progress=False)
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir()), "a half-made store"
    with pytest.raises(ArgumentError, match="8192"):
        lz.open_dataset(source, root=tmp_path / "r", resize={IMG: (100000, 100000)}, progress=False)
    assert not (tmp_path / "r").exists()


def test_8_cli_ranges_are_bounded(capsys):
    from lerobot_zarr.cli import main

    with pytest.raises(SystemExit) as info:
        main(["convert", "nowhere", "--episodes", "0-999999999999"])
    assert info.value.code == 2 and "more than" in capsys.readouterr().err


def test_8_mp4_index_with_nan_timestamps(mp4_store, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(mp4_store, root)
    index = json.loads((root / CAM / "mp4.json").read_bytes())
    index["from_timestamp"][0] = float("nan")
    (root / CAM / "mp4.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStoreError, match="mp4.json.*finite"):
        lz.open_dataset(root)


def test_8_argument_shapes_are_refused_with_typed_errors(source, tmp_path):
    with pytest.raises(DeltaTimestampsError, match="flat list"):
        lz.open_dataset(source, root=tmp_path / "a", delta_timestamps={"action": [[0.0, 1 / 30], [2 / 30, 0.1]]},
                        progress=False)
    with pytest.raises(ArgumentError, match="repo id"):
        lz.open_dataset("org/..x", revision="main")
    with pytest.raises(SchemaMismatchError, match="bytes"):
        lz.create(tmp_path / "c", fps=10, features={"x": {"dtype": "float32", "shape": [2**40], "names": None}})
    assert not (tmp_path / "c").exists()
    with pytest.raises(ArgumentError, match="storage"):
        lz.open_dataset(source, root=tmp_path / "e", storage={IMG: ""}, progress=False)
    pytest.importorskip("simplejpeg")
    ds = lz.open_dataset(source, root=tmp_path / "j", storage="jpeg", progress=False)
    assert ds.array_specs[IMG].codec_spec["codec"] == "jpeg"


def test_8_a_changed_folder_is_named_as_changed(source, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(source, src)
    lz.open_dataset(src, root=tmp_path / "s", progress=False)
    next((src / "data").rglob("*.parquet")).touch()
    os.utime(next((src / "data").rglob("*.parquet")), (1, 1))
    with pytest.raises(SourceMismatchError) as info:
        lz.open_dataset(src, root=tmp_path / "s", progress=False)
    message = str(info.value)
    assert "as it was when the store was made" in message and "files changed" in message, message


def test_8_an_lfs_upload_failure_is_a_hub_error(source, tmp_path, monkeypatch):
    import functools

    from hub_fixtures import make_env
    from huggingface_hub import lfs

    from lerobot_zarr.testing.hub_server import HubServer

    # huggingface_hub retries each LFS upload 5 times, waiting 1 to 8 s: the same retries, without the waits
    monkeypatch.setattr(lfs, "http_backoff", functools.partial(lfs.http_backoff, base_wait_time=0.01,
                                                               max_wait_time=0.01))
    ds = lz.open_dataset(source, root=tmp_path / "s", progress=False)
    with HubServer(tmp_path / "hub", tokens={"tok": "alice"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        server.inject_fault(path_contains="__lfs", kind="500", count=1000, method="PUT")
        with pytest.raises(HubError, match="alice/data"):
            ds.push("alice/data", token="tok", progress=False)
        assert len(server.requests("PUT", "__lfs")) >= 6, "huggingface_hub retried the upload"


def test_8_a_damaged_frame_live_is_repaired_by_the_next_writer(tmp_path):
    ds = writer_store(tmp_path / "s")
    ds.close()
    live = ds.root / "frame_live" / "c" / "0"
    good = live.read_bytes()
    live.write_bytes(bytes(len(good)))
    lz.open_dataset(ds.root, mode="r+").close()
    assert live.read_bytes() == good


def test_8_a_full_volume_still_opens_for_writing_and_deletes(tmp_path, monkeypatch):
    ds = writer_store(tmp_path / "s", n=6, pack_bytes=6 * 8 * 3 * 8)
    ds.close()
    (ds.root / ".frame_live-pending").touch()  # a commit was cut short: the next writer rewrites zarr's copies
    (ds.root / "episode_length" / "c" / "0").write_bytes(b"stale")  # (only those that differ)
    from lerobot_zarr.store import committing as store

    real = store.atomic_write

    def full(path, data, **kwargs):
        if "zarr.json" not in str(path) or Path(path).parent != ds.root:
            raise lz.DiskSpaceError(errno.ENOSPC, f"{path}: no space left", path=str(path))
        return real(path, data, **kwargs)

    def no_space(path, data, **kwargs):  # zarr's copies, written in place
        raise lz.DiskSpaceError(errno.ENOSPC, f"{path}: no space left", path=str(path))

    monkeypatch.setattr(store, "atomic_write", full)
    monkeypatch.setattr(store, "write_in_place", no_space)
    monkeypatch.setattr(store, "create_sized", lambda *a, **k: False)
    with pytest.warns(lz.LeRobotZarrWarning, match="could not be repaired"):
        w = lz.WritableDataset(ds.root, min_free_bytes=2**62)  # a volume below its margin
    monkeypatch.undo()
    with pytest.raises(lz.DiskSpaceError):
        w.add_episode({"x": np.ones((3, 3), np.float32), "cam": np.ones((3, 6, 8, 3), np.uint8)}, task="t")
    w.delete_episodes([0, 1, 2])  # makes room: no compaction (it would need space first)
    assert w.meta.total_episodes == 3
    w.close()
    assert lz.verify(ds.root, progress=False).ok


def test_8_damaged_mp4_headers_are_typed_errors(mp4_store, tmp_path):
    """Found by the store fuzz: a flipped bit in an mp4's header left a stream without a decoder, and sampling
    raised AttributeError. Every bit position tried in the first 2 KB ends in correct frames or a typed error."""
    root = tmp_path / "store"
    shutil.copytree(mp4_store, root)
    want = lz.open_dataset(mp4_store).get_batch(np.arange(3))[CAM]
    mp4 = next((root / CAM / "videos").rglob("*.mp4"))
    data = mp4.read_bytes()
    outcomes = set()
    for at in range(0, min(len(data), 2048), 11):
        damaged = bytearray(data)
        damaged[at] ^= 1 << (at % 8)
        mp4.unlink()
        mp4.write_bytes(bytes(damaged))
        try:
            got = lz.open_dataset(root).get_batch(np.arange(3))[CAM]
            outcomes.add("frames" if np.array_equal(got, want) else "other frames")
        except LeRobotZarrError as exc:
            outcomes.add(type(exc).__name__)
    assert "CorruptSourceError" in outcomes, outcomes


# ------------------------------------------------------------------------------------------------ 9. issue 29
def _folder_in_place_of(path: Path, junk: bool = False) -> Path:
    path.unlink()
    path.mkdir()
    if junk:
        (path / "junk").write_text("x")
    return path


def _pack(root: Path, name: str, e: int = 0) -> Path:
    state = read_state(root)
    return Path(chunk_path(root, name, int(state.table.chunk[e]), state.arrays[name].ndim))


@pytest.mark.parametrize("what", ["pack", ".lock", "frame_live"])
def test_9_a_file_replaced_by_a_folder_is_a_corrupt_store_error_naming_it(tmp_path, what):
    """Readers, writers and verify --repair: a typed error naming the folder (or, for the reader of a store whose
    .lock or frame_live is a folder, the right values: neither is read to sample)."""
    ds = writer_store(tmp_path / "s")
    want = ds.get_batch(np.arange(len(ds)))["x"]
    ds.close()
    root = tmp_path / "s"
    folder = _folder_in_place_of({"pack": _pack(root, "x"), ".lock": root / ".lock",
                                  "frame_live": next((root / "frame_live" / "c").iterdir())}[what])
    if what == "pack":
        with pytest.raises(CorruptStoreError, match="is a folder") as info:
            lz.open_dataset(root).get_batch(np.arange(4))
        assert info.value.path == str(folder)
    else:
        np.testing.assert_array_equal(lz.open_dataset(root).get_batch(np.arange(len(want)))["x"], want)
    if what != "pack":  # (a writer leaves a damaged pack alone until it writes it)
        with pytest.raises(CorruptStoreError, match="is a folder") as info:
            with lz.open_dataset(root, mode="r+") as w:
                w.add_episode({"x": np.zeros((3, 3), np.float32), "cam": np.zeros((3, 6, 8, 3), np.uint8)}, task="t")
        assert info.value.path == str(folder)
    report = lz.verify(root, repair=True, progress=False)
    assert not report.ok and any(str(folder) in line for line in report.not_repaired + report.store_problems + [
        why for per in report.damaged.values() for why in per.values()]), report


def test_9_verify_repair_removes_an_empty_folder_in_place_of_a_pack_and_refuses_one_with_files(source, tmp_path):
    root = lz.open_dataset(source, root=tmp_path / "s", progress=False).root
    want = lz.open_dataset(root).get_batch(np.arange(10))["action"]
    _folder_in_place_of(_pack(root, "action"))
    assert lz.verify(root, repair=True, progress=False).ok
    np.testing.assert_array_equal(lz.open_dataset(root).get_batch(np.arange(10))["action"], want)
    folder = _folder_in_place_of(_pack(root, "action"), junk=True)
    report = lz.verify(root, repair=True, progress=False)
    assert not report.ok and "could not be removed" in report.not_repaired[0], report
    assert (folder / "junk").exists() and lz.open_dataset(root).num_episodes == 5, "nothing was dropped"


def test_9_a_read_only_volume_reads_and_refuses_writes_with_a_typed_error(source, tmp_path, monkeypatch):
    """The system's EROFS (injected: a test cannot mount a volume) on every write under ``ro``: reads and verify
    work, writes are ReadOnlyStoreError naming the place, verify --record reports that it changed nothing."""
    ro = tmp_path / "ro"
    lz.open_dataset(source, root=ro / "store", progress=False).close()
    writer_store(ro / "rec").close()
    real_open, real_mkdir = os.open, os.mkdir

    def refused(path):
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def open_(path, flags, *args, **kwargs):
        if os.fspath(path).startswith(str(ro)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise refused(path)
        return real_open(path, flags, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if os.fspath(path).startswith(str(ro)):
            raise refused(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "mkdir", mkdir)
    assert len(lz.open_dataset(ro / "store")) == len(lz.open_dataset(source, root=ro / "store", progress=False))
    assert lz.verify(ro / "store", progress=False).ok
    for what, write in [("a new store", lambda: lz.open_dataset(source, root=ro / "new", progress=False)),
                        ("create", lambda: lz.create(ro / "c", fps=10, features=FEATURES)),
                        ("a writer", lambda: lz.open_dataset(ro / "rec", mode="r+")),
                        ("an export", lambda: lz.open_dataset(ro / "store").to_lerobot(ro / "out", progress=False))]:
        with pytest.raises(lz.ReadOnlyStoreError, match="read-only") as info:
            write()
        assert info.value.path.startswith(str(ro)), what
    report = lz.verify(ro / "store", record=True, progress=False)
    assert "nothing changed" in report.not_repaired[0] and "read-only" in report.not_repaired[0]


RLIMIT_FSIZE = """
import json, resource, sys
import numpy as np
import lerobot_zarr as lz
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # Python ignores SIGXFSZ: writes past it fail EFBIG
features = {"x": {"dtype": "float32", "shape": [3], "names": None}}
out = {}
for what, pack_bytes, frames in [("a pack past the limit", 32 << 20, 4), ("an episode past it", 1 << 16, 200_000)]:
    try:
        with lz.create(f"{sys.argv[1]}/{frames}", fps=10, features=features, durable=False,
                       pack_bytes=pack_bytes) as w:
            w.add_episode({"x": np.zeros((frames, 3), np.float32)}, task="t")
        out[what] = None
    except Exception as exc:
        out[what] = [type(exc).__name__, isinstance(exc, lz.LeRobotZarrError), str(exc)]
print(json.dumps(out))
"""


def test_9_the_file_size_limit_is_a_disk_space_error(tmp_path):
    proc = subprocess.run([sys.executable, "-c", RLIMIT_FSIZE, str(tmp_path)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(MAIN)), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(got) == 2
    for what, result in got.items():
        assert result is not None and result[0] == "DiskSpaceError" and result[1] and "ulimit -f" in result[2], \
            (what, result)
