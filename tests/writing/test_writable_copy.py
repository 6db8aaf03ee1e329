"""``open_dataset(folder_or_repo, mode="r+", root=...)`` writes to a store of its own: the cache's shared store of
the source (what every other open of it reads) never changes and stays equal to the source. The copy shares the
shared store's pack files by hard links until a writer changes a pack, which it copies first.
Also: values that do not fit a feature's dtype are refused by every write path, stats survive a kill between an
edit's stats write and its commit, and a full disk leaves the store at its last commit."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import make_env

import lerobot_zarr as lz
from lerobot_zarr import ArgumentError, DiskSpaceError, ValueRangeError
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

MAIN = Path(__file__).resolve().parents[2]


def source_frames(src: Path, key: str) -> np.ndarray:
    tables = [pq.read_table(f) for f in sorted((src / "data").glob("*/*.parquet"))]
    values = np.concatenate([np.array(t.column(key).to_pylist(), dtype=np.float32) for t in tables])
    index = np.concatenate([np.array(t.column("index").to_pylist()) for t in tables])
    return values[np.argsort(index)]


@pytest.fixture
def src(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "cache"))
    return write_sample_dataset(tmp_path / "src", n_episodes=8, lengths=(20, 40), episodes_per_file=4)


def test_r_plus_on_a_source_needs_a_root_of_its_own(src):
    lz.open_dataset(src, progress=False)
    with pytest.raises(ArgumentError, match="root="):
        lz.open_dataset(src, mode="r+", progress=False)
    shared = lz.open_dataset(src, progress=False).root
    with pytest.raises(ArgumentError, match="shared store"):
        lz.open_dataset(src, root=shared, mode="r+", progress=False)


def check_copy_on_write(shared_root: Path, copy: lz.WritableDataset, want_action: np.ndarray) -> None:
    shared_commit = (shared_root / "zarr.json").read_bytes()
    shared_generation = read_state(shared_root).generation
    state = read_state(copy.root)
    pack = int(state.table.chunk[0])
    linked = copy.root / "action" / "c" / str(pack) / "0"
    assert os.stat(linked).st_nlink == 2, "the copy shares the shared store's pack files (hard links)"
    with copy.edit(0, frames=(0, 5)) as ep:
        ep["action"][:] = 7.0
    assert np.all(copy[0]["action"] == 7.0)
    new_pack = int(read_state(copy.root).table.chunk[0])
    assert new_pack != pack, "the pack was copied to a new pack before its first write"
    assert os.stat(copy.root / "action" / "c" / str(new_pack) / "0").st_nlink == 1
    copy.add_episode({k: np.zeros((6, *v.shape[1:]), np.float32) for k, v in
                      ((k, np.asarray(copy.episode(0)[k])) for k in ("observation.state", "action"))}, task="new")
    copy.delete_episodes([1])
    copy.close()
    shared = lz.LeRobotZarrDataset(shared_root)
    np.testing.assert_array_equal(shared.get_batch(np.arange(len(shared)))["action"], want_action)
    assert read_state(shared_root).source["kind"] in ("local", "hub"), "the shared store was never edited"
    assert read_state(shared_root).generation == shared_generation
    assert (shared_root / "zarr.json").read_bytes() == shared_commit, "the shared store's commit point is unchanged"


def test_r_plus_copy_shares_files_until_written_local(src, tmp_path):
    shared = lz.open_dataset(src, progress=False)
    copy = lz.open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False)
    check_copy_on_write(Path(shared.root), copy, source_frames(src, "action"))
    again = lz.open_dataset(src, progress=False)  # later opens of the source still read the source's data
    np.testing.assert_array_equal(again.get_batch(np.arange(len(again)))["action"], source_frames(src, "action"))
    mine = lz.open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False)  # the copy reopens as itself
    assert np.all(mine[0]["action"][:1] == 7.0) and mine.meta.total_episodes == 8


def test_r_plus_copy_shares_files_until_written_hub(src, tmp_path, monkeypatch):
    with HubServer(tmp_path / "server") as server:
        server.add_repo("org/ds", src, tags=["v3.0"])
        make_env(monkeypatch, tmp_path, server.endpoint)
        shared = lz.open_dataset("org/ds", progress=False)
        before = len(server.requests())
        copy = lz.open_dataset("org/ds", root=tmp_path / "mine", mode="r+", progress=False)
        assert not [r for r in server.requests()[before:] if "/data/" in r.path], "the copy downloaded data again"
        check_copy_on_write(Path(shared.root), copy, source_frames(src, "action"))


def test_r_plus_without_a_complete_shared_store_transcodes_into_root(src, tmp_path):
    lz.open_dataset(src, episodes=[0], progress=False)  # the shared store holds one episode only
    with lz.open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False) as copy:
        assert copy.meta.total_episodes == 8
        assert os.stat(copy.root / "action" / "c" / "0" / "0").st_nlink == 1
        np.testing.assert_array_equal(copy.get_batch(np.arange(len(copy)))["action"], source_frames(src, "action"))


# ------------------------------------------------------------------------------------------------ values that fit
FEATURES = {"small": {"dtype": "int16", "shape": [2], "names": None},
            "x": {"dtype": "float32", "shape": [2], "names": None},
            "flag": {"dtype": "bool", "shape": [1], "names": None}}


def good(n: int = 4) -> dict:
    return {"small": np.zeros((n, 2), np.int16), "x": np.zeros((n, 2), np.float32), "flag": np.zeros(n, bool)}


@pytest.mark.parametrize("feature,value", [
    ("small", np.full((4, 2), 70000, dtype=np.int64)),
    ("small", np.full((4, 2), -40000, dtype=np.int32)),
    ("small", np.full((4, 2), np.nan)),
    ("small", np.full((4, 2), 1.5)),
    ("x", np.full((4, 2), 1e40)),
    ("flag", np.array([0, 1, 2, 0])),
    ("flag", np.array([0.0, 1.0, 0.0, 1.0])),
    ("x", np.array([["a", "b"]] * 4)),
])
def test_values_that_do_not_fit_are_refused_everywhere(tmp_path, feature, value):
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, min_free_bytes=0)
    ds.add_episode(good(), task="t")
    before = (ds.root / "zarr.json").read_bytes()
    frames = dict(good(), **{feature: value})
    with pytest.raises((ValueRangeError, lz.SchemaMismatchError)) as info:
        ds.add_episode(frames, task="t")
    assert feature in str(info.value) and "episode 1" in str(info.value)
    with pytest.raises((ValueRangeError, lz.SchemaMismatchError)) as info:
        ds.add_frame({k: v[2] for k, v in frames.items()}, task="t")
    assert feature in str(info.value)
    with pytest.raises((ValueRangeError, lz.SchemaMismatchError)) as info, ds.edit(0) as ep:
        ep[feature][:] = value
    assert feature in str(info.value) and "episode 0" in str(info.value)
    assert (ds.root / "zarr.json").read_bytes() == before
    stored = ds.get_batch(np.arange(len(ds)))
    assert not stored["small"].any() and not stored["x"].any() and not stored["flag"].any()
    ds.close()


def test_values_that_fit_are_stored_exactly(tmp_path):
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, min_free_bytes=0)
    ds.add_episode({"small": np.full((3, 2), 32767, np.int64), "x": np.full((3, 2), 0.1), "flag": [1, 0, 1]},
                   task="t")
    with ds.edit(0) as ep:
        ep["small"][0] = -32768
        ep["x"] += 1
    b = ds.get_batch(np.arange(3))
    assert b["small"].tolist() == [[-32768, -32768], [32767, 32767], [32767, 32767]]
    np.testing.assert_array_equal(b["x"], np.full((3, 2), np.float32(0.1) + np.float32(1), np.float32))
    assert b["flag"].tolist() == [True, False, True]
    ds.close()


def test_create_refuses_what_a_store_cannot_hold(tmp_path):
    bad = [({"s": {"dtype": "object", "shape": [1]}}, "object"),
           ({"s": {"dtype": "str", "shape": [1]}}, "str"),
           ({"s": {"dtype": "<U4", "shape": [1]}}, "U4"),
           ({"task": {"dtype": "float32", "shape": [1]}}, "task"),
           ({"action_is_pad": {"dtype": "bool", "shape": [1]}}, "_is_pad"),
           ({"index": {"dtype": "float32", "shape": [1]}}, "index")]
    for features, needle in bad:
        with pytest.raises((lz.UnsupportedDtypeError, lz.SchemaMismatchError), match=needle):
            lz.create(tmp_path / needle, fps=10, features=features)
    for fps in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="fps"):
            lz.create(tmp_path / "f", fps=fps, features=FEATURES)


# ------------------------------------------------------------------------------------------------ stats and crashes
KILL_AFTER_STATS = r"""
import os, sys
import numpy as np
import lerobot_zarr as lz
import lerobot_zarr.writing.transaction as w
ds = lz.open_dataset(sys.argv[1], mode="r+")
with ds.edit(1, features=["x"]) as ep:
    ep["x"][:] = 1000.0
real = w.commit
def die(*args, **kwargs):
    os._exit(3)  # killed after the edit's stats files were written, before the commit that merges them
w.commit = die
ds.flush()
"""


def test_stats_after_a_kill_between_an_edits_stats_and_its_commit(tmp_path):
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, min_free_bytes=0)
    for n in (3, 5, 4):
        ds.add_episode(dict(good(n), x=np.arange(2 * n, dtype=np.float32).reshape(n, 2)), task="t")
    ds.close()
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_STATS, str(tmp_path / "s")], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(MAIN)), timeout=300)
    assert proc.returncode == 3, proc.stderr
    lz.open_dataset(tmp_path / "s", mode="r+").close()  # the next writer notices and commits the right stats
    ds = lz.open_dataset(tmp_path / "s")
    x = ds.get_batch(np.arange(len(ds)))["x"].astype(np.float64)
    assert x.max() == 1000.0
    np.testing.assert_allclose(ds.meta.stats["x"]["max"], x.max(axis=0))
    np.testing.assert_allclose(ds.meta.stats["x"]["mean"], x.mean(axis=0), rtol=1e-6)


@pytest.mark.parametrize("when", ["rows", "root"])
def test_a_full_disk_leaves_the_last_commit(tmp_path, monkeypatch, when):
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, min_free_bytes=0)
    ds.add_episode(good(), task="t")
    before = ds.get_batch(np.arange(len(ds)))
    real_pwrite = os.pwrite

    def full(fd, data, offset):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if (when == "root") == ("zarr.json" in target):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", full)
    monkeypatch.delattr(os, "pwritev", raising=False)
    with pytest.raises(DiskSpaceError) as info:
        ds.add_episode(good(6), task="t")
    assert info.value.path and str(tmp_path / "s") in str(info.value)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    ds.close()
    again = lz.open_dataset(tmp_path / "s", mode="r+")
    assert again.meta.total_episodes == 1
    for k, v in again.get_batch(np.arange(len(again))).items():
        assert np.array_equal(np.asarray(v), np.asarray(before[k])) if k != "task" else v == before[k]
    again.add_episode(good(2), task="t")
    assert again.meta.total_episodes == 2
    again.close()


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("op", ["delete_episodes", "delete_frames", "set_task", "edit", "ring eviction"])
def test_a_full_disk_during_other_writes_leaves_the_last_commit(tmp_path, monkeypatch, op):
    capacity = 12 if op == "ring eviction" else None
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, min_free_bytes=0, pack_bytes=64,
                   capacity_frames=capacity)
    for k in range(3):
        ds.add_episode({name: v + k for name, v in good().items()} | {"flag": good()["flag"]}, task="t")
    before, root = ds.get_batch(np.arange(len(ds))), (ds.root / "zarr.json").read_bytes()
    monkeypatch.setattr(os, "pwrite", _no_space)
    monkeypatch.delattr(os, "pwritev", raising=False)
    with pytest.raises(DiskSpaceError) as info:
        if op == "delete_episodes":
            ds.delete_episodes([0])
        elif op == "delete_frames":
            ds.delete_frames(1, frames=(1, 3))
        elif op == "set_task":
            ds.set_task(0, "another task")
        elif op == "edit":
            with ds.edit(2) as ep:
                ep["x"][:] = 5.0
            ds.flush()  # an edit's stats and commit
        else:
            ds.add_episode(good(), task="t")
    assert info.value.path and str(tmp_path / "s") in str(info.value)
    monkeypatch.undo()
    assert (ds.root / "zarr.json").read_bytes() == root, f"{op}: the commit point changed"
    ds.close()
    if op == "edit":  # an edit first records what it edits (for the next writer after a crash): refused before
        lz.open_dataset(tmp_path / "s", mode="r+").close()  # any value changed, so the values are the commit's
    again = lz.open_dataset(tmp_path / "s")
    for k, v in again.get_batch(np.arange(len(again))).items():
        assert np.array_equal(np.asarray(v), np.asarray(before[k])) if k != "task" else v == before[k], k
    x = again.get_batch(np.arange(len(again)))["x"].astype(np.float64)
    np.testing.assert_allclose(again.meta.stats["x"]["max"], x.max(axis=0))
    np.testing.assert_allclose(again.meta.stats["x"]["mean"], x.mean(axis=0), rtol=1e-6)


def test_a_full_disk_while_copying_a_shared_pack_leaves_both_stores_as_they_were(src, tmp_path, monkeypatch):
    lz.open_dataset(src, progress=False)
    copy = lz.open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False)
    root = (copy.root / "zarr.json").read_bytes()
    from lerobot_zarr.utils import fileio as _fileio

    real_copy = _fileio._copy_sparse

    def half_then_full(fd_in, fd_out):
        os.write(fd_out, os.pread(fd_in, 100, 0))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_fileio, "_copy_sparse", half_then_full)
    with pytest.raises(DiskSpaceError), copy.edit(0) as ep:
        ep["action"][:] = 7.0
    monkeypatch.setattr(_fileio, "_copy_sparse", real_copy)
    assert (copy.root / "zarr.json").read_bytes() == root
    assert not list(copy.root.rglob(".*.tmp-*")), "the partial copy was removed"
    copy.close()
    for ds in (lz.open_dataset(src, progress=False), lz.open_dataset(tmp_path / "mine", progress=False)):
        np.testing.assert_array_equal(ds.get_batch(np.arange(len(ds)))["action"], source_frames(src, "action"))
