"""LeRobot's files beside a recorded store (``writing.export.export_beside``, what a recording's ``finalize()``
writes): made of the store's last commit, once (a second export of the same commit writes nothing), never seen
half-written (a process stopped at any rename leaves the previous files or none, and the store as it was), its
single-episode videos hard links of the store's segments, and stale segments pruned. LeRobot's own class reading
them is checked in test_lerobot_recording.py (it needs torch and lerobot)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av", reason="PyAV is not installed (optional extra lerobot_zarr[video])")
pytest.importorskip("pyarrow", reason="pyarrow is not installed")

import pyarrow.parquet as pq

import lerobot_zarr.writing.export as export_module
from lerobot_zarr.sampling.dataset import LeRobotZarrDataset
from lerobot_zarr.writing.export import EXPORT_MARKER, export_beside, exported_state
from lerobot_zarr.writing.segments import SEGMENTS, encode_missing
from lerobot_zarr.writing.writer import WritableDataset, create

FEATURES = {"observation.state": {"dtype": "float32", "shape": [2], "names": None},
            "observation.images.cam": {"dtype": "video", "shape": [16, 24, 3],
                                       "names": ["height", "width", "channels"]}}


@contextlib.contextmanager
def _store(tmp_path: Path) -> Iterator[tuple[Path, WritableDataset]]:
    """A store of FEATURES at ``tmp_path / "ds"``, closed afterwards."""
    root = tmp_path / "ds"
    store = create(root, fps=10, features=FEATURES, durable=False)
    try:
        yield root, store
    finally:
        store.close()


def _episode(store: WritableDataset, e: int, n: int) -> None:
    store.add_episode({"observation.state": np.stack([np.array([e, i], np.float32) for i in range(n)]),
                       "observation.images.cam": np.full((n, 16, 24, 3), 40 * e + 10, np.uint8)}, task=f"task {e}")


def _lerobot_episodes(root: Path) -> list[int]:
    """The episode of each row of LeRobot's data files beside the store (what LeRobot's class would serve)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    rows = [pq.read_table(path).column("episode_index").to_pylist() for path in sorted(root.glob("data/*/*.parquet"))]
    episodes = [e for part in rows for e in part]
    assert len(episodes) == info["total_frames"] and len(set(episodes)) == info["total_episodes"]
    return episodes


def test_export_beside_writes_once_per_commit_and_follows_new_episodes(tmp_path):
    root = tmp_path / "ds"
    store = create(root, fps=10, features=FEATURES, durable=False)
    try:
        _episode(store, 0, 3)
        _episode(store, 1, 2)
        assert export_beside(store.reader) is True
        assert _lerobot_episodes(root) == [0, 0, 0, 1, 1]
        stamp = (root / "meta" / "info.json").stat().st_mtime_ns
        assert export_beside(store.reader) is False  # the same commit: nothing written
        assert (root / "meta" / "info.json").stat().st_mtime_ns == stamp
        _episode(store, 2, 4)
        assert export_beside(store.reader) is True
        assert _lerobot_episodes(root) == [0, 0, 0, 1, 1, 2, 2, 2, 2]
        assert exported_state(root)["episodes"] == 3
    finally:
        store.close()
    # the store is still what opens at root, beside LeRobot's folders (not a transcode of them into the cache)
    from lerobot_zarr import open_dataset
    from lerobot_zarr.sources import resolve_source

    assert type(resolve_source(root)).__name__ == "StoreSource"
    with open_dataset(root) as ds:
        assert Path(ds.root) == root and len(ds) == 9 and ds.meta.total_episodes == 3
    WritableDataset(root).close()  # its writer finds nothing to clean up or refuse


@pytest.mark.parametrize("stop_at", [1, 4, 6])
def test_an_export_stopped_at_any_rename_leaves_the_previous_files_or_none(tmp_path, monkeypatch, stop_at):
    """Renames into or out of root are the export's only steps visible there (6: the previous meta, data, videos
    out, the new data, videos, meta in): stopped before the ``stop_at``-th (as a kill there would), root holds the
    previous export whole, or no meta/info.json (no dataset), never a mix; the store keeps every episode; the next
    export completes."""
    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        export_beside(store.reader)
        _episode(store, 1, 2)
        calls = []
        real = os.replace

        class Killed(BaseException):
            pass

        def replace(src, dst):
            if Path(dst).parent == root or Path(src).parent == root:
                calls.append(dst)
                if len(calls) == stop_at:
                    raise Killed
            return real(src, dst)

        monkeypatch.setattr(export_module.os, "replace", replace)
        with pytest.raises(Killed):
            export_beside(store.reader)
        monkeypatch.setattr(export_module.os, "replace", real)
        assert len(calls) == stop_at
        if (root / "meta" / "info.json").exists():
            assert exported_state(root)["episodes"] == 1 and _lerobot_episodes(root) == [0, 0, 0]
        else:
            assert stop_at > 1
        with LeRobotZarrDataset(root) as ds:
            assert ds.meta.total_episodes == 2
        assert export_beside(store.reader) is True
        assert _lerobot_episodes(root) == [0, 0, 0, 1, 1]
        assert not [p for p in root.iterdir() if p.name.startswith(".lerobot-")]  # the stopped one's leftovers



def test_a_lone_episode_video_is_the_segment_hard_linked_and_stale_segments_are_pruned(tmp_path):
    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        encode_missing(root)
        (segment,) = (root / SEGMENTS).glob("*.mp4")
        stale = root / SEGMENTS / ("0" * 40 + ".mp4")  # a segment no episode has (of an episode since changed)
        stale.write_bytes(segment.read_bytes())
        os.utime(stale, (1, 1))
        export_beside(store.reader)
        video = root / "videos" / "observation.images.cam" / "chunk-000" / "file-000.mp4"
        assert video.stat().st_ino == segment.stat().st_ino  # no bytes copied, nothing encoded
        assert not stale.exists() and segment.exists()



def test_a_feature_named_as_lerobot_folders_is_refused(tmp_path):
    root = tmp_path / "ds"
    store = create(root, fps=10, features={"data": {"dtype": "float32", "shape": [1], "names": None}}, durable=False)
    try:
        store.add_episode({"data": np.zeros((2, 1), np.float32)}, task="t")
        with pytest.raises(ValueError, match="'data'"):
            export_beside(store.reader)
        assert not (root / "meta").exists() and not (root / EXPORT_MARKER).exists()
    finally:
        store.close()


def test_files_a_lerobot_tool_changed_in_place_are_never_overwritten(tmp_path):
    """LeRobot's tools edit a folder in place (modify_tasks rewrites the data and episode files): the next export
    (a resumed recording's finalize) refuses to undo that, naming the files, before it changes anything."""
    from lerobot_zarr.errors import StoreExistsError
    from lerobot_zarr.writing.export import edited_beside, exported_beside

    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        export_beside(store.reader)
        assert exported_beside(store.reader) and edited_beside(root) == []
        (data,) = root.glob("data/*/*.parquet")
        table = pq.read_table(data)
        pq.write_table(table.set_column(table.schema.get_field_index("task_index"), "task_index",
                                        table.column("task_index")), data)
        assert edited_beside(root) == [data.relative_to(root).as_posix()] and not exported_beside(store.reader)
        _episode(store, 1, 2)
        with pytest.raises(StoreExistsError, match="changed since"):
            export_beside(store.reader)
        assert exported_state(root)["episodes"] == 1 and _lerobot_episodes(root) == [0, 0, 0]



def test_a_process_killed_while_exporting_leaves_the_previous_files_or_none(tmp_path):
    """A real SIGKILL at several instants of an export (after it started: while writing, renaming...): root holds
    the previous export whole or no meta/info.json, the store every episode; the next export completes."""
    import signal
    import subprocess
    import sys
    import time

    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        export_beside(store.reader)
        for e in range(1, 4):
            _episode(store, e, 20)
        child = ("import sys, lerobot_zarr.writing.export as x; from lerobot_zarr.sampling.dataset import "
                 "LeRobotZarrDataset as D; ds = D(sys.argv[1]); print('go', flush=True); x.export_beside(ds); "
                 "print('done', flush=True)")
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        for delay in (0.0, 0.3, 1.0):
            proc = subprocess.Popen([sys.executable, "-c", child, str(root)], stdout=subprocess.PIPE, text=True,
                                    env=env)
            assert proc.stdout.readline().strip() == "go"
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
            proc.stdout.close()
            if (root / "meta" / "info.json").exists():
                episodes = exported_state(root)["episodes"]
                assert episodes in (1, 4) and len(set(_lerobot_episodes(root))) == episodes
            with LeRobotZarrDataset(root) as ds:
                assert ds.meta.total_episodes == 4
        export_beside(store.reader)
        assert sorted(set(_lerobot_episodes(root))) == [0, 1, 2, 3]



def test_a_closed_video_file_is_linked_by_the_next_exports_not_joined_again(tmp_path, monkeypatch):
    """Exports after each saved episode (one cache, as a recorder's): a video file an earlier export closed keeps
    its inode (hard linked, not joined again), and every file beside equals a fresh to_lerobot's."""
    import lerobot_zarr.writing.export_videos as videos_module
    from lerobot_zarr.writing.beside_cache import BesideCache
    from lerobot_zarr.writing.export import to_lerobot

    # video files of ~8000 raw bytes: 3 episodes of 3 frames of 16x24x3 each (the default 200 MB limit)
    monkeypatch.setattr(videos_module, "_AV1_RATIO", 8000 / (200 * 2**20))
    root = tmp_path / "ds"
    cache = BesideCache()
    cam = Path("videos/observation.images.cam/chunk-000")
    store = create(root, fps=10, features=FEATURES, durable=False)
    try:
        for e in range(4):
            _episode(store, e, 3)
            assert export_beside(store.reader, cache=cache) is True
        closed = (root / cam / "file-000.mp4").stat().st_ino
        joined = []
        real_add = videos_module.VideoFiles.add
        monkeypatch.setattr(videos_module.VideoFiles, "add",
                            lambda self, segment, frames: joined.append(self.number) or real_add(self, segment, frames))
        _episode(store, 4, 3)
        assert export_beside(store.reader, cache=cache) is True
        assert (root / cam / "file-000.mp4").stat().st_ino == closed
        assert joined == [1, 1]  # the open file's episodes only
        fresh = to_lerobot(store.reader, tmp_path / "fresh", progress=False)
    finally:
        store.close()
    assert sorted(p.name for p in (root / cam).iterdir()) == ["file-000.mp4", "file-001.mp4"]
    for name in ("file-000.mp4", "file-001.mp4"):
        assert (root / cam / name).read_bytes() == (fresh / cam / name).read_bytes()
    assert _lerobot_episodes(root) == [e for e in range(5) for _ in range(3)]


def test_a_file_beside_replaced_by_another_of_the_same_size_and_time_is_written_again(tmp_path, monkeypatch):
    """A closed video file beside swapped for another file (same size and modification time, another inode) is not
    linked into the next export: it is joined again from the segments."""
    import shutil

    import lerobot_zarr.writing.export_videos as videos_module
    from lerobot_zarr.writing.beside_cache import BesideCache

    monkeypatch.setattr(videos_module, "_AV1_RATIO", 8000 / (200 * 2**20))
    root = tmp_path / "ds"
    cache = BesideCache()
    video = root / "videos/observation.images.cam/chunk-000/file-000.mp4"
    store = create(root, fps=10, features=FEATURES, durable=False)
    try:
        for e in range(4):
            _episode(store, e, 3)
        assert export_beside(store.reader, cache=cache) is True
        good = video.read_bytes()
        st = video.stat()
        swapped = video.with_name("swapped")
        swapped.write_bytes(bytes(len(good)))  # another file, its size and time made the same
        os.utime(swapped, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(swapped, video)
        shutil.rmtree(root / "meta")  # (so that the edit is not refused as a LeRobot tool's)
        swapped_ino = video.stat().st_ino
        _episode(store, 4, 3)
        assert export_beside(store.reader, cache=cache) is True
        assert video.stat().st_ino != swapped_ino and video.read_bytes() == good
    finally:
        store.close()


def test_a_hint_given_after_its_episode_was_exported_is_not_kept(tmp_path):
    """The recorder's camera stats (BesideCache.hint) for an episode its thread already exported without them are
    dropped by the next export (not kept for the whole recording)."""
    from lerobot_zarr.writing.beside_cache import BesideCache

    root = tmp_path / "ds"
    cache = BesideCache()
    store = create(root, fps=10, features=FEATURES, durable=False)
    try:
        _episode(store, 0, 3)
        assert export_beside(store.reader, cache=cache) is True
        cache.hint(0, {})  # too late: episode 0 is exported
        _episode(store, 1, 2)
        assert export_beside(store.reader, cache=cache) is True
        assert cache.hints == {}
    finally:
        store.close()


def test_an_export_whose_files_vanished_before_the_move_leaves_the_previous_files(tmp_path, monkeypatch):
    """The export's temporary folder removed before its files are moved into place (another process's debris
    sweep): the export raises, the previous files stay whole (never none or a mix), and the next export completes."""
    import shutil
    import threading

    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        export_beside(store.reader)
        _episode(store, 1, 2)
        real = threading.Lock()

        class Swept:  # the lock, taken after a sweep of the export folders (what another process may do)
            def __enter__(self):
                real.acquire()
                for debris in root.glob(".lerobot-export.tmp-*"):
                    shutil.rmtree(debris)

            def __exit__(self, *exc):
                real.release()

        monkeypatch.setattr(export_module, "_BESIDE_LOCK", Swept())
        with pytest.raises(FileNotFoundError, match="vanished"):
            export_beside(store.reader)
        assert exported_state(root)["episodes"] == 1 and _lerobot_episodes(root) == [0, 0, 0]
        monkeypatch.undo()
        assert export_beside(store.reader) is True
        assert _lerobot_episodes(root) == [0, 0, 0, 1, 1]



def test_encode_false_never_encodes_an_episode_whose_segment_is_invalid(tmp_path):
    with _store(tmp_path) as (root, store):
        _episode(store, 0, 3)
        encode_missing(root)
        (segment,) = (root / SEGMENTS).glob("*.mp4")
        segment.write_bytes(b"not an mp4")  # there, but fails validation
        assert export_beside(store.reader, encode=False) is False
        assert segment.read_bytes() == b"not an mp4" and not (root / "meta" / "info.json").exists()
        assert not [p for p in root.iterdir() if p.name.startswith(".lerobot-")]

