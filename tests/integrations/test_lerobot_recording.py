"""Recording through the drop-in: ``LeRobotDataset.create`` / ``resume`` / ``add_frame`` / ``save_episode`` /
``finalize`` / ``push_to_hub`` as LeRobot 0.6.1's, into the crash-safe store.

Checked against LeRobot itself: the same frames recorded with LeRobot's class and with the drop-in (the
``lerobot_recorded`` kinds) give, once exported as a push exports them, the same dataset to LeRobot's reader; the
frame checks raise LeRobot's errors with LeRobot's messages; a recorder killed with SIGKILL (a real process) keeps
every episode whose ``save_episode`` returned, readable by another process without ``finalize``.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")
pytest.importorskip("lerobot", reason="lerobot is not installed (recording is compared with LeRobot 0.6.1's)")

from lerobot_recorded import REPO_ID, record  # noqa: E402

from lerobot_zarr.errors import ArgumentError, LeRobotZarrWarning  # noqa: E402
from lerobot_zarr.torch import LeRobotDataset  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _reference():
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Reference

    return Reference


FEATURES = {"observation.state": {"dtype": "float32", "shape": (3,), "names": ["a", "b", "c"]},
            "action": {"dtype": "float32", "shape": (2,), "names": None},
            "observation.images.cam": {"dtype": "video", "shape": (24, 32, 3),
                                       "names": ["height", "width", "channels"]}}


def _frame(e: int, i: int) -> dict:
    return {"observation.state": np.array([e, i, e * 100 + i], np.float32), "action": np.full(2, i, np.float32),
            "observation.images.cam": np.full((24, 32, 3), (e * 31 + i) % 256, np.uint8), "task": f"task {e % 2}"}


# ------------------------------------------------------------------------------------------ same as LeRobot's


def _same_dataset(theirs_root: Path, ours_root: Path, kind: str) -> None:
    """LeRobot's reader on LeRobot's recording and on the drop-in's exported recording: the same info (features,
    counts), numeric stats, tasks of each frame, numbers exactly and camera frames as close as two encodings."""
    ref = _reference()
    a, b = ref(REPO_ID, root=theirs_root), ref(REPO_ID, root=ours_root)
    ia, ib = a.meta.info.to_dict(), b.meta.info.to_dict()
    for key in ("fps", "robot_type", "total_episodes", "total_frames", "total_tasks", "features",
                "codebase_version"):
        assert ia[key] == ib[key], (kind, key, ia[key], ib[key])
    for key, stats in a.meta.stats.items():
        if key in a.meta.camera_keys or key == "task_index":  # LeRobot numbers an episode's new tasks in set order
            continue
        for stat in ("min", "max", "mean", "count"):
            np.testing.assert_allclose(b.meta.stats[key][stat], stats[stat], rtol=1e-6,
                                       err_msg=f"{kind} {key} {stat}")
    assert sorted(a.meta.tasks.index) == sorted(b.meta.tasks.index), kind
    from lerobot.datasets.video_utils import FrameTimestampError

    for i in range(len(a)):
        y = b[i]
        try:
            x = a[i]
        except FrameTimestampError:  # LeRobot's concatenated HEVC (open GOPs) loses frames of its own recording
            continue
        assert set(x) == set(y) and x["task"] == y["task"], (kind, i)
        for key, value in x.items():
            if key in ("task", "task_index") or not hasattr(value, "dtype"):
                assert key == "task_index" or value == y[key], (kind, i, key)
                continue
            assert value.dtype == y[key].dtype and value.shape == y[key].shape, (kind, i, key)
            if key in a.meta.video_keys and key not in a.meta.depth_keys:  # two lossy encodings of the same frames
                assert float((value - y[key]).abs().mean()) < 0.03, (kind, i, key)
            elif key in a.meta.depth_keys and key in a.meta.video_keys:  # 12-bit codes, lossless HEVC: the same
                torch.testing.assert_close(value, y[key], msg=f"{kind} {i} {key}")
            else:
                assert torch.equal(value, y[key]), (kind, i, key)


@pytest.mark.parametrize("kind", ["numeric", "string", "image", "video_h264", "task_switch", "depth_video_log",
                                  "depth_image_float32"])
def test_the_same_frames_recorded_give_lerobots_dataset(lerobot_recorded, tmp_path, kind):
    """The frames LeRobot's fixture records, recorded with the drop-in and finalized: LeRobot reads the folder
    (LeRobot's files beside the store) as the same dataset as its own recording (encoder settings such as h264
    kept); a push exports the same files."""
    ours = record(kind, tmp_path, LeRobotDataset)
    assert (ours / "zarr.json").is_file() and any(ours.glob("data/*/*.parquet"))  # the store, and LeRobot's files
    _same_dataset(lerobot_recorded(kind), ours, kind)
    theirs_meta, ours_meta = _reference()(REPO_ID, root=ours).meta, LeRobotDataset(REPO_ID, root=ours).meta
    assert ours_meta.features == theirs_meta.features, kind  # cameras' info as LeRobot's files beside describe them
    assert ours_meta.video_path == theirs_meta.video_path, kind


def test_create_and_resume_take_lerobots_parameters():
    """Every parameter of LeRobot's create and resume, in its place with its default (ours add keyword-only ones)."""
    ref = _reference()
    for name in ("create", "resume"):
        theirs = list(inspect.signature(getattr(ref, name)).parameters.values())
        ours = list(inspect.signature(getattr(LeRobotDataset, name)).parameters.values())
        assert [(p.name, p.default, p.kind) for p in ours[:len(theirs)]] == \
            [(p.name, p.default, p.kind) for p in theirs], name
        assert all(p.kind is p.KEYWORD_ONLY for p in ours[len(theirs):]), name


def test_an_unknown_keyword_is_lerobots_type_error(tmp_path):
    """An unknown keyword of a recording method is Python's TypeError worded as for LeRobot's class (it names
    ``LeRobotDataset.<method>()``, not the class that defines it)."""
    ref = _reference()
    ours = LeRobotDataset.create(REPO_ID, 30, {"state": {"dtype": "float32", "shape": (2,), "names": None}},
                                 root=tmp_path / "ours")
    theirs = ref.create(REPO_ID, 30, {"state": {"dtype": "float32", "shape": (2,), "names": None}},
                        root=tmp_path / "theirs")
    calls = [lambda cls, ds: cls.create(REPO_ID, 30, {}, root=tmp_path / "x", unknown=1),
             lambda cls, ds: cls.resume(REPO_ID, root=tmp_path / "x", unknown=1),
             lambda cls, ds: ds.add_frame({}, unknown=1), lambda cls, ds: ds.save_episode(unknown=1),
             lambda cls, ds: ds.finalize(unknown=1)]
    for call in calls:
        messages = []
        for cls, ds in ((ref, theirs), (LeRobotDataset, ours)):
            with pytest.raises(TypeError) as raised:
                call(cls, ds)
            messages.append(str(raised.value))
        assert messages[1] == messages[0]
    ours.finalize()
    theirs.finalize()


def test_create_refuses_what_lerobot_refuses(tmp_path):
    create = LeRobotDataset.create
    with pytest.raises(TypeError):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "a", no_such_argument=1)
    with pytest.raises(ValueError, match="use_videos"):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "b", use_videos=False)
    with pytest.raises(ValueError, match="video backend"):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "c", video_backend="ffmpeg-cli")
    with pytest.raises(ValueError, match="'/'"):
        create(REPO_ID, 30, {"a/b": {"dtype": "float32", "shape": (1,), "names": None}}, root=tmp_path / "d")
    with pytest.raises(ArgumentError, match="batch_encoding_size"):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "e", batch_encoding_size=0)
    with pytest.raises(TypeError, match="no_such_field"):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "f", rgb_encoder={"no_such_field": 1})
    (tmp_path / "g").mkdir()
    with pytest.raises(FileExistsError):
        create(REPO_ID, 30, FEATURES, root=tmp_path / "g")
    with pytest.raises(ValueError, match="root"):
        LeRobotDataset.resume(REPO_ID)
    assert not any((tmp_path / name).exists() for name in "abcdef")  # nothing left by a refused create


@pytest.mark.parametrize("change", ["missing", "extra", "dtype", "shape", "not-array", "camera-shape", "no-task"])
def test_add_frame_checks_are_lerobots(tmp_path, change):
    """A wrong frame: LeRobot's ValueError with LeRobot's message (its validate_frame), nothing buffered."""
    from lerobot.datasets.feature_utils import validate_frame

    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=tmp_path / "ds")
    frame = _frame(0, 0)
    if change == "missing":
        del frame["action"]
    elif change == "extra":
        frame["other"] = np.zeros(1, np.float32)
    elif change == "dtype":
        frame["action"] = frame["action"].astype(np.float64)
    elif change == "shape":
        frame["observation.state"] = np.zeros(4, np.float32)
    elif change == "not-array":
        frame["action"] = [0.0, 1.0]
    elif change == "camera-shape":
        frame["observation.images.cam"] = np.zeros((24, 31, 3), np.uint8)
    else:
        del frame["task"]
    with pytest.raises(ValueError) as theirs:
        validate_frame(frame, ds.meta.features)
    with pytest.raises(ValueError) as ours:
        ds.add_frame(frame)
    assert str(ours.value) == str(theirs.value)
    assert not ds.has_pending_frames()
    ds.finalize()


def _leaf_types(value: object) -> object:
    """A stats.json value with each number replaced by its JSON type (int or float), its nesting kept."""
    return [_leaf_types(v) for v in value] if isinstance(value, list) else type(value).__name__


@pytest.mark.parametrize("kind", ["numeric", "nd", "string", "image", "depth_image_float32", "one_frame"])
def test_stats_are_lerobots_for_every_kind(lerobot_recorded, tmp_path, kind):
    """The same frames recorded with LeRobot's class and with the drop-in: stats.json (the features, and for each
    statistic its nesting, shape and JSON type: floats for integer and bool features too, N-D features reduced over
    every axis but the last), the per-episode stats columns of meta/episodes (Arrow types), and ``meta.stats``
    (while recording, after finalize, reopened: numpy dtypes and shapes) are LeRobot's; min, max and count equal,
    means and stds within LeRobot's float32 arithmetic. (Quantiles: docs/torch.md, not compared.)"""
    import pyarrow.parquet as pq

    theirs = lerobot_recorded(kind)
    recorders = []

    class Keeping(LeRobotDataset):  # the drop-in, kept to read its meta.stats while recording
        __slots__ = ()

        def save_episode(self, *args, **kwargs):
            super().save_episode(*args, **kwargs)
            recorders.append({k: {s: np.asarray(v).copy() for s, v in st.items()} for k, st in self.meta.stats.items()})

    ours = record(kind, tmp_path, Keeping)
    a, b = (json.loads((root / "meta/stats.json").read_text()) for root in (theirs, ours))
    assert set(a) == set(b), kind
    for key in a:
        assert set(a[key]) == set(b[key]), (kind, key)
        for stat in a[key]:
            assert _leaf_types(b[key][stat]) == _leaf_types(a[key][stat]), (kind, key, stat, a[key][stat])
            if stat in ("min", "max", "count"):
                np.testing.assert_allclose(b[key][stat], a[key][stat], rtol=1e-6, err_msg=f"{kind} {key} {stat}")
            elif stat in ("mean", "std") and key != "task_index":  # (LeRobot numbers new tasks in set order)
                np.testing.assert_allclose(b[key][stat], a[key][stat], rtol=1e-4, atol=1e-6,
                                           err_msg=f"{kind} {key} {stat}")
    columns = [{f.name: f.type for f in pq.read_schema(next((root / "meta/episodes").rglob("*.parquet")))
                if f.name.startswith("stats/")} for root in (theirs, ours)]
    assert columns[1] == columns[0], kind
    loaded = _reference()(REPO_ID, root=theirs).meta.stats
    for stats in (recorders[-1], LeRobotDataset(REPO_ID, root=ours).meta.stats):
        assert set(stats) == set(loaded), kind
        for key, by_stat in loaded.items():
            for stat, want in by_stat.items():
                got = np.asarray(stats[key][stat])
                assert (got.dtype, got.shape) == (want.dtype, want.shape), (kind, key, stat, got.dtype, want.dtype)


def _same_stats(stats: dict, values: np.ndarray) -> None:
    assert np.asarray(stats["count"]).tolist() == [len(values)]
    np.testing.assert_array_equal(stats["min"], values.min(axis=0))
    np.testing.assert_array_equal(stats["max"], values.max(axis=0))
    np.testing.assert_allclose(stats["mean"], values.mean(axis=0, dtype=np.float64), rtol=1e-6)


def test_recording_lifecycle(tmp_path):
    """The buffer (has_pending_frames, clear_episode_buffer), counts following each save, reading as LeRobot
    allows (after finalize), finalize idempotent, recording methods refused after it, resume going on."""
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root, robot_type="arm")
    with pytest.raises(ValueError, match="add one or several frames"):
        ds.save_episode()
    ds.add_frame(_frame(9, 0))
    assert ds.has_pending_frames()
    ds.clear_episode_buffer()
    assert not ds.has_pending_frames()
    for e, n in enumerate((3, 2)):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
        assert not ds.has_pending_frames() and ds.meta.total_episodes == e + 1
    assert ds.meta.total_frames == 5 and ds.num_frames == 5 and list(ds.meta.tasks.index) == ["task 0", "task 1"]
    states = np.array([_frame(e, i)["observation.state"] for e, n in enumerate((3, 2)) for i in range(n)])
    _same_stats(ds.meta.stats["observation.state"], states)  # while recording, as LeRobot's meta gives them
    with pytest.raises(RuntimeError, match="finalize"):
        ds[0]
    ds.finalize()
    ds.finalize()
    with pytest.raises(RuntimeError):
        ds.add_frame(_frame(2, 0))
    item = ds[4]
    assert item["observation.state"].tolist() == [1, 1, 101] and item["task"] == "task 1"
    assert item["observation.images.cam"].shape == (3, 24, 32)
    assert float(item["observation.images.cam"][0, 0, 0]) == pytest.approx(32 / 255)

    again = LeRobotDataset.resume(REPO_ID, root=root)
    again.add_frame(_frame(2, 0))
    again.save_episode()
    _same_stats(again.meta.stats["observation.state"], np.concatenate([states, [_frame(2, 0)["observation.state"]]]))
    again.finalize()
    assert len(again) == 6 and again.meta.total_episodes == 3 and again.meta.robot_type == "arm"
    assert again[5]["observation.state"].tolist() == [2, 0, 200]


def test_save_episode_renames_the_spill_into_a_new_pack(tmp_path, monkeypatch):
    """An episode that starts a new pack gets the recorder's spill file as that pack (a rename: the same inode, no
    copy of its frames); one that fits the open pack's free rows is copied; both read back as recorded, and the
    recording goes on in a new spill."""
    import functools

    import lerobot_zarr.writing.writer as writer_module
    from lerobot_zarr.store.state import chunk_path, read_state

    frame_bytes = 24 * 32 * 3  # packs of 4 frames of the camera
    monkeypatch.setattr(writer_module, "create", functools.partial(writer_module.create, pack_bytes=4 * frame_bytes))
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    key = "observation.images.cam"
    for e, n in enumerate((6, 3, 1)):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        spill = ds.writer._spills[key].path
        inode = os.stat(spill).st_ino
        ds.save_episode()
        state = read_state(root)
        pack = int(state.table.chunk[e])
        renamed = os.stat(chunk_path(root, key, pack, 4)).st_ino == inode
        assert renamed == (e < 2), e  # episode 2 (1 frame) fits pack 1's free row: copied
        # the old spill renamed, or copied from and removed (never emptied in place: an encoder may be reading
        # it); the next episode records into a new (empty) one
        assert not os.path.exists(spill) and os.path.getsize(ds.writer._spills[key].path) == 0
    ds.finalize()
    got = [ds[i] for i in range(len(ds))]
    expected = [(e, i) for e, n in enumerate((6, 3, 1)) for i in range(n)]
    for item, (e, i) in zip(got, expected, strict=True):
        ref = _frame(e, i)
        assert item["observation.state"].tolist() == ref["observation.state"].tolist()
        np.testing.assert_array_equal((item[key] * 255).round().byte().permute(1, 2, 0).numpy(), ref[key])


def test_a_save_episode_failing_before_its_commit_keeps_the_episode_streamed(tmp_path, monkeypatch):
    """A save_episode whose commit fails without taking the spill (the episode stays in the buffer) told the
    encoder to complete the episode's video: the episode is streamed again, so the frames added after are encoded
    as they come too, and the next save_episode returns with its videos."""
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    for i in range(3):
        ds.add_frame(_frame(0, i))
    store = ds.writer._store
    monkeypatch.setattr(store, "add_episode", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space (test)")))
    with pytest.raises(OSError, match="test"):
        ds.save_episode()
    monkeypatch.undo()
    assert ds.has_pending_frames()
    for i in range(3, 5):
        ds.add_frame(_frame(0, i))
    spill = ds.writer._spills["observation.images.cam"]
    _wait_until(lambda: _taken(spill) == 5, "the encoder to encode the frames added after the failure", 60)
    ds.save_episode()
    assert ds.writer._all_encoded and len(_named_segments(root)) == 1
    ds.finalize()
    _same_as_recorded(_reference()(REPO_ID, root=root), (5,))


def test_a_save_episode_failing_after_its_commit_never_writes_into_the_taken_spill(tmp_path, monkeypatch):
    """A save_episode that raises after its commit (here: the writer's follower of commits fails) keeps the episode
    (committed), and the recorder never writes the next episode's frames into the file the store took as that
    episode's pack: the next episode records into a new spill and both read back exact."""
    import functools

    import lerobot_zarr.writing.writer as writer_module
    from lerobot_zarr.store.state import read_state

    monkeypatch.setattr(writer_module, "create", functools.partial(writer_module.create, pack_bytes=4 * 24 * 32 * 3))
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    for i in range(6):
        ds.add_frame(_frame(0, i))
    tx = ds.writer._store._tx
    follow = tx.on_commit

    def fail_after(state):
        follow(state)
        tx.on_commit = follow
        raise OSError(5, "Input/output error (test)")

    tx.on_commit = fail_after
    with pytest.raises(OSError, match="test"):
        ds.save_episode()
    assert len(read_state(root).table) == 1 and not ds.has_pending_frames()
    for i in range(6):
        ds.add_frame(_frame(1, i))
    ds.save_episode()
    ds.finalize()
    for index, (e, i) in enumerate([(e, i) for e in range(2) for i in range(6)]):
        item = ds[index]
        assert item["observation.state"].tolist() == _frame(e, i)["observation.state"].tolist()
        np.testing.assert_array_equal((item["observation.images.cam"] * 255).round().byte().permute(1, 2, 0).numpy(),
                                      _frame(e, i)["observation.images.cam"])


@pytest.mark.parametrize("durable", [True, False])
def test_a_durable_recording_starts_writing_frames_to_disk_as_they_come(tmp_path, monkeypatch, durable):
    """A durable store flushes each episode at its commit: the spill asks the system to start writing its frames
    (every 4 MiB, the whole spill by the end) so that the flush finds them on their way; a store that is not
    durable does not."""
    import lerobot_zarr.integrations.lerobot_recorder as recorder_module

    calls = []
    real = recorder_module.start_writeback
    monkeypatch.setattr(recorder_module, "start_writeback", lambda fd, offset, n: (calls.append((offset, n)),
                                                                                   real(fd, offset, n)))
    features = {"observation.images.cam": {"dtype": "video", "shape": (480, 640, 3),
                                           "names": ["height", "width", "channels"]}}
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=tmp_path / "ds", durable=durable)
    frame_bytes = 480 * 640 * 3
    for i in range(12):
        ds.add_frame({"observation.images.cam": np.full((480, 640, 3), i, np.uint8), "task": "t"})
    ds.writer._writer.drain()
    if durable:
        assert calls and calls[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(calls, calls[1:]))
        assert calls[-1][0] + calls[-1][1] > 12 * frame_bytes - (4 << 20) and all(n >= 4 << 20 for _, n in calls)
    else:
        assert calls == []
    ds.save_episode()
    ds.finalize()
    assert int(ds[11]["observation.images.cam"][0, 0, 0] * 255 + 0.5) == 11


def test_depth_unit_learnt_from_the_first_frame(tmp_path):
    """A depth camera without a unit records its first frame's (float metres here), as LeRobot's recorder; a later
    frame of another dtype is refused when the episode is saved (LeRobot's writer fails on it too)."""
    features = {"depth": {"dtype": "image", "shape": (8, 10, 1), "names": ["height", "width", "channels"],
                          "info": {"is_depth_map": True}}}
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=tmp_path / "ds", use_videos=False)
    metres = np.linspace(0.1, 2.0, 80, dtype=np.float32).reshape(8, 10, 1)
    ds.add_frame({"depth": metres, "task": "t"})
    assert ds.meta.features["depth"]["info"]["depth_unit"] == "m"
    ds.save_episode()
    ds.add_frame({"depth": (metres * 1000).astype(np.uint16), "task": "t"})
    with pytest.raises(FileNotFoundError, match="depth"):
        ds.save_episode()
    ds.clear_episode_buffer()
    ds.finalize()
    assert np.array_equal(LeRobotDataset(REPO_ID, root=tmp_path / "ds", depth_output_unit="m")[0]["depth"].numpy(),
                          metres.transpose(2, 0, 1))


def test_add_frame_queues_camera_frames_without_copying_them(tmp_path):
    """With LeRobot's asynchronous image writers asked for, add_frame holds a camera frame until its thread has
    written it, as LeRobot's image writer does, and copies nothing: a copy made it ~10x longer, so likelier to lose
    its CPU on a loaded machine (its p99, benchmarks/bench_record.py speed). The frames saved are the ones given."""
    import tracemalloc

    features = {"observation.images.cam": {"dtype": "video", "shape": (240, 320, 3),
                                           "names": ["height", "width", "channels"]}}
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=tmp_path / "ds", image_writer_threads=4)
    rng = np.random.default_rng(0)
    frames = [{"observation.images.cam": rng.integers(0, 256, (240, 320, 3), np.uint8), "task": "t"}
              for _ in range(4)]
    ds.add_frame(dict(frames[0]))
    tracemalloc.start()
    try:
        for f in frames[1:]:
            ds.add_frame(dict(f))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < frames[0]["observation.images.cam"].nbytes, peak
    ds.save_episode()
    ds.finalize()
    for i, f in enumerate(frames):
        assert torch.equal(ds[i]["observation.images.cam"],
                           torch.from_numpy(f["observation.images.cam"]).permute(2, 0, 1) / 255)


def test_without_image_writers_a_frame_changed_after_add_frame_is_recorded_as_given(tmp_path):
    """LeRobot without image writers (the default) writes a frame in add_frame: a caller reusing its array for the
    next frame records every frame as it was given, so the drop-in copies it then."""
    features = {"observation.images.cam": {"dtype": "image", "shape": (24, 32, 3),
                                           "names": ["height", "width", "channels"]}}
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=tmp_path / "ds", use_videos=False)
    buffer = np.zeros((24, 32, 3), np.uint8)
    for i in range(5):
        buffer[:] = 10 * i  # one array, rewritten for each frame, as a camera reading into a preallocated buffer
        ds.add_frame({"observation.images.cam": buffer, "task": "t"})
    ds.save_episode()
    ds.finalize()
    got = [float(ds[i]["observation.images.cam"][0, 0, 0]) * 255 for i in range(5)]
    assert got == pytest.approx([0, 10, 20, 30, 40]), got


def test_a_camera_frame_not_written_fails_the_episode(tmp_path, monkeypatch):
    """A camera frame the writer cannot write (a full disk) fails save_episode with DiskSpaceError and commits
    nothing; once the buffer is cleared the recording goes on."""
    import errno

    from lerobot_zarr.errors import DiskSpaceError

    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=tmp_path / "ds")
    real = os.pwrite

    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    ds.add_frame(_frame(0, 0))
    monkeypatch.setattr(os, "pwrite", pwrite)
    ds.add_frame(_frame(0, 1))
    with pytest.raises(DiskSpaceError):
        ds.save_episode()
    monkeypatch.setattr(os, "pwrite", real)
    assert ds.meta.total_episodes == 0
    ds.clear_episode_buffer()
    ds.add_frame(_frame(1, 0))
    ds.save_episode()
    ds.finalize()
    assert len(ds) == 1 and ds[0]["observation.state"].tolist() == [1, 0, 100]


# ------------------------------------------------------------------------------------------------ crash safety

_RECORDER = """
import os, sys
import numpy as np
sys.path.insert(0, {tests!r})
from test_lerobot_recording import FEATURES, REPO_ID, _frame
from lerobot_zarr.torch import LeRobotDataset
root, first, fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = (LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root) if first == 0 else
      LeRobotDataset.resume(REPO_ID, root=root))
out = os.fdopen(fd, "w", buffering=1)
for e in range(first, first + 1000):
    for i in range(5 + e % 4):
        ds.add_frame(_frame(e, i))
        out.write("f\\n")
    ds.save_episode()
    out.write(f"saved {{e}}\\n")
"""


def _record_until_killed(root: Path, first: int, events: int) -> list[int]:
    """A recorder process (create, or resume after ``first`` episodes) SIGKILLed once it reported ``events``
    frames or saves; the episodes whose save_episode returned (reported before the kill)."""
    read, write = os.pipe()
    script = _RECORDER.format(tests=str(REPO / "tests" / "integrations"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", script, str(root), str(first), str(write)], pass_fds=(write,),
                            env=env, stderr=subprocess.PIPE)
    os.close(write)
    saved, seen = [], 0
    stalled = threading.Timer(600, proc.kill)  # a recorder that stops reporting ends the loop below, not the run
    stalled.start()
    try:
        with os.fdopen(read) as lines:
            for line in lines:
                if line.startswith("saved"):
                    saved.append(int(line.split()[1]))
                seen += 1
                if seen == events:
                    proc.send_signal(signal.SIGKILL)
                    break
            else:
                raise AssertionError(f"the recorder ended before it was killed (after {seen} reports): "
                                     f"{proc.wait()} {proc.stderr.read()[-2000:]}")
    finally:
        stalled.cancel()
    proc.wait(timeout=120)
    proc.stderr.close()
    return saved


def test_a_killed_recorder_keeps_every_saved_episode(tmp_path):
    """SIGKILL at instants chosen by what the recorder reported (inside add_frame, between frames, inside or right
    after save_episode): every episode whose save_episode returned is there, exact, read by this process without
    finalize; resume goes on after them; nothing half-written is served, by the store or by LeRobot's files beside
    it (of one commit, whole, or none)."""
    root = tmp_path / "ds"
    rng = np.random.default_rng(7)
    expected: list[int] = []
    for kill in range(2):
        saved = _record_until_killed(root, len(expected) if kill else 0, int(rng.integers(8, 40)))
        assert saved == list(range(len(expected), len(expected) + len(saved)))
        ds = LeRobotDataset(REPO_ID, root=root)
        assert ds.meta.total_episodes >= len(expected) + len(saved)  # a save may have committed as it was killed
        expected = list(range(ds.meta.total_episodes))
        index = 0
        for e in expected:
            for i in range(5 + e % 4):
                item, want = ds[index], _frame(e, i)
                assert item["observation.state"].numpy().tolist() == want["observation.state"].tolist(), (e, i)
                assert item["task"] == want["task"] and int(item["episode_index"]) == e
                assert torch.equal(item["observation.images.cam"],
                                   torch.from_numpy(want["observation.images.cam"]).permute(2, 0, 1) / 255)
                index += 1
        assert len(ds) == index
        _check_files_beside(root, ds.meta.total_episodes)


def _check_files_beside(root: Path, episodes: int) -> None:
    """LeRobot's files beside a store whose recorder was killed: those of one of its commits, whole (as the export
    wrote them, read by LeRobot 0.6.1 to their last frame), or no dataset LeRobot reads (no episode table)."""
    from lerobot_zarr.writing.export import edited_beside, exported_state

    marker = exported_state(root)
    if marker is None:
        assert not (root / "meta" / "episodes").exists()
        return
    assert edited_beside(root) == []
    theirs = _reference()(REPO_ID, root=root)
    assert theirs.meta.total_episodes == marker["episodes"] <= episodes and len(theirs) == marker["frames"]
    last = theirs[len(theirs) - 1]
    assert int(last["episode_index"]) == marker["episodes"] - 1


# ------------------------------------------------------------------------------------------------------- the Hub


def test_push_to_hub_gives_what_lerobot_loads(tmp_path, monkeypatch):
    """push_to_hub with LeRobot's arguments, to the project's test Hub: LeRobot 0.6.1 downloads and reads the
    dataset (the frames recorded, the card's tags and license); push_videos=False uploads no video and
    tag_version=False leaves the tag; allow_patterns limits what is uploaded."""
    from hub_fixtures import make_env

    from lerobot_zarr.testing.hub_server import HubServer

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    ds = LeRobotDataset.create("someone/recorded", 30, FEATURES, root=tmp_path / "ds", robot_type="arm")
    for e, n in enumerate((3, 2)):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
    with HubServer(tmp_path / "server", tokens={"hf_write": "alice"}) as hub:
        make_env(monkeypatch, tmp_path, hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "hf_write")
        ds.push_to_hub(tags=["so100", "tutorial"], license="mit", push_videos=False, tag_version=False)
        assert not any(f.startswith("videos/") for f in hub.list_files("someone/recorded"))
        assert "v3.0" not in hub.refs("someone/recorded").get("tags", {})
        with pytest.warns(LeRobotZarrWarning, match="not fields of LeRobot's dataset card"):  # as LeRobot: taken
            ds.push_to_hub(allow_patterns=["meta/info.json"], not_a_card_field="x")  # while recording: last commit
        with pytest.raises(TypeError, match="dataset_info"):  # LeRobot's call passes it itself
            ds.push_to_hub(dataset_info={})
        ds.finalize()
        ds.push_to_hub(tags=["so100", "tutorial"], license="mit")
        files = hub.list_files("someone/recorded")
        assert any(f.startswith("videos/observation.images.cam/") for f in files)
        card = hub.get_file("someone/recorded", "README.md").decode()
        assert "- so100" in card and "license: mit" in card
        template = tmp_path / "card.md"  # LeRobot renders a template_path given (huggingface_hub's from_template)
        template.write_text("---\n{{ card_data }}\n---\n\n# {{ repo_id }} by {{ author }}\n\n{{ dataset_structure }}")
        ds.push_to_hub(license="mit", template_path=str(template), author="alice", allow_patterns=["README.md"])
        card = hub.get_file("someone/recorded", "README.md").decode()
        assert card.startswith("---\n") and "license: mit" in card and "- LeRobot" in card
        assert "\n# someone/recorded by alice\n" in card and '"total_episodes": 2' in card
        with pytest.raises(FileNotFoundError, match="template_path"):
            ds.push_to_hub(template_path=str(tmp_path / "none.md"))
        theirs = _reference()("someone/recorded", root=tmp_path / "download")
        assert len(theirs) == 5 and theirs.meta.robot_type == "arm" and theirs.num_episodes == 2
        assert theirs.meta.features["observation.images.cam"]["info"]["video.codec"] == "av1"
        for index, (e, i) in enumerate([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]):
            item, want = theirs[index], _frame(e, i)
            assert item["observation.state"].tolist() == want["observation.state"].tolist()
            assert item["task"] == want["task"]
            cam = torch.from_numpy(want["observation.images.cam"]).permute(2, 0, 1) / 255
            assert float((item["observation.images.cam"] - cam).abs().mean()) < 0.02


def test_a_templated_card_is_lerobots_even_given_a_dataset_structure(tmp_path):
    """push_to_hub(template_path=..., dataset_structure=...): LeRobot's card function replaces the structure given
    with the dataset's; the drop-in's card is the same text (not a TypeError)."""
    import types

    from lerobot.datasets.utils import create_lerobot_dataset_card

    from lerobot_zarr.lerobot.writers import write_card

    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n\n# {{ repo_id }} by {{ author }}\n\n{{ dataset_structure }}")
    info = {"codebase_version": "v3.0", "fps": 30, "total_episodes": 2}
    fields = {"tags": ["so100"], "license": "mit", "repo_id": "someone/recorded", "author": "alice",
              "template_path": str(template), "dataset_structure": "the caller's"}
    theirs = str(create_lerobot_dataset_card(dataset_info=types.SimpleNamespace(to_dict=lambda: info), **fields))
    write_card(tmp_path, info, fields)
    assert (tmp_path / "README.md").read_text() == theirs
    assert "the caller's" not in theirs and '"total_episodes": 2' in theirs


@pytest.mark.parametrize("mode", [{}, {"streaming_encoding": True, "encoder_threads": 1}, {"batch_encoding_size": 2}])
def test_a_stalled_background_encoder_is_waited_for_within_a_bound_and_finalize_joins_its_segments(
        tmp_path, monkeypatch, caplog, mode):
    """A recording with video cameras starts a background encoder per camera (by default too, as LeRobot encodes at
    each save_episode; streaming_encoding / batch_encoding_size as LeRobot's); with its process stopped (SIGSTOP),
    save_episode still returns (it waits for the episode's videos, as LeRobot's, only while the encoder makes
    progress: SAVE_TIMEOUT s without, logged, the episode known not encoded); once it made the segments
    (flush_pending_videos), finalize joins them into LeRobot's files without encoding any (batches: the last,
    incomplete one is encoded at the flush, as LeRobot's finalize encodes it), and the push exports the same
    without encoding; LeRobot 0.6.1 loads
    both."""
    from hub_fixtures import make_env

    import lerobot_zarr.writing.export as export_module
    import lerobot_zarr.writing.export_videos as videos_module
    from lerobot_zarr.testing.hub_server import HubServer

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    encodes: list[int] = []
    real = videos_module.make_segment
    monkeypatch.setattr(videos_module, "make_segment", lambda ds, enc, e, *a, **k: (encodes.append(e),
                                                                                      real(ds, enc, e, *a, **k))[1])
    import lerobot_zarr.integrations.lerobot_recorder as recorder_module

    monkeypatch.setattr(recorder_module, "SAVE_TIMEOUT", 1.0)
    ds = LeRobotDataset.create("someone/streamed", 30, FEATURES, root=tmp_path / "ds", **mode)
    encoders = ds.writer._encoder
    assert encoders is not None and encoders.cameras == ["observation.images.cam"]
    assert ds.writer._streaming_encoder is (encoders if "streaming_encoding" in mode else None)
    lengths = (4, 3, 5)
    ds.add_frame(_frame(0, 0))  # starts the encoder
    (encoder,) = encoders.processes
    os.kill(encoder.pid, signal.SIGSTOP)
    import logging

    try:
        for e, n in enumerate(lengths):
            for i in range(int(e == 0), n):
                ds.add_frame(_frame(e, i))
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger=recorder_module.__name__):
                ds.save_episode()
            due = e % 2 == 1 if "batch_encoding_size" in mode else True  # where LeRobot encodes (and waits)
            warned = [r.getMessage() for r in caplog.records if "made no progress for 1 s" in r.getMessage()]
            assert len(warned) == due and all("returns without this episode's videos" in m for m in warned), e
            assert not ds.writer._all_encoded and not _named_segments(tmp_path / "ds"), e
        assert encoder.process.poll() is None  # stopped, not waited for beyond the bound
    finally:
        os.kill(encoder.pid, signal.SIGCONT)
    ds.writer.flush_pending_videos()
    ds.finalize()
    assert encodes == [], f"episodes {encodes} were encoded at finalize: their segments were not joined"
    assert encoder.process.returncode == 0
    _same_as_recorded(_reference()("someone/streamed", root=tmp_path / "ds"), lengths)
    with HubServer(tmp_path / "server", tokens={"hf_write": "alice"}) as hub:
        make_env(monkeypatch, tmp_path, hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "hf_write")
        ds.push_to_hub()
        assert encodes == [], f"episodes {encodes} were encoded at push: their segments were not joined"
        # an export that is not the recording's (`lerobot-zarr push`) takes the recorded encoder_threads too
        out = export_module.to_lerobot(tmp_path / "ds", tmp_path / "again", progress=False)
        assert encodes == []
        info = json.loads((out / "meta" / "info.json").read_text())["features"]["observation.images.cam"]["info"]
        assert "encoder_threads" not in info and "video.encoder_threads" not in info
        _same_as_recorded(_reference()("someone/streamed", root=tmp_path / "download"), lengths)


def _same_as_recorded(theirs, lengths) -> None:
    """LeRobot's class reads the episodes ``_frame`` made: numbers exactly, camera frames as an encoding keeps them."""
    assert len(theirs) == sum(lengths) and theirs.num_episodes == len(lengths)
    index = 0
    for e, n in enumerate(lengths):
        for i in range(n):
            item, want = theirs[index], _frame(e, i)
            assert int(item["episode_index"]) == e and item["observation.state"].tolist() == \
                want["observation.state"].tolist()
            cam = torch.from_numpy(want["observation.images.cam"]).permute(2, 0, 1) / 255
            assert float((item["observation.images.cam"] - cam).abs().mean()) < 0.02, (e, i)
            index += 1


TWO_CAMERAS = {**FEATURES, "observation.images.top": {"dtype": "video", "shape": (24, 32, 3),
                                                      "names": ["height", "width", "channels"]}}


def _two_camera_frame(e: int, i: int) -> dict:
    rng = np.random.default_rng(e * 1000 + i)
    return {**_frame(e, i), "observation.images.top": rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)}


def _decoded_videos(root: Path) -> dict[str, list[np.ndarray]]:
    """Each camera's frames in LeRobot's files under ``root``, decoded file by file in order."""
    import av

    out = {}
    for folder in sorted((root / "videos").iterdir()):
        frames = []
        for path in sorted(folder.rglob("*.mp4")):
            with av.open(str(path)) as c:
                frames += [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
        out[folder.name] = frames
    return out


@pytest.mark.parametrize("how", ["stalled", "killed"])
def test_finalize_completes_without_its_encoders(tmp_path, monkeypatch, how):
    """Encoders stalled (SIGSTOP: finalize waits only its bound without progress, then stops them) or SIGKILLed
    (mid-episode, or wherever the kill lands) do not keep finalize from completing: it encodes what they did not
    make (the two cameras in parallel), and LeRobot's files decode to the frames a fresh export of
    the store gives; a second finalize writes nothing."""
    import lerobot_zarr.integrations.lerobot_recorder as recorder_module
    import lerobot_zarr.writing.export as export_module
    import lerobot_zarr.writing.export_videos as videos_module
    from lerobot_zarr.writing.segments import SEGMENTS

    encodes: list[int] = []
    real = videos_module.make_segment
    monkeypatch.setattr(videos_module, "make_segment", lambda ds, enc, e, *a, **k: (encodes.append(e),
                                                                                      real(ds, enc, e, *a, **k))[1])
    import lerobot_zarr.integrations.lerobot_encoders as encoders_module

    # the waits for encoders without progress: short where they are stopped (they expire whatever the load), long
    # where one runs (it must not be taken for stalled beside busy processes)
    wait = 1.0 if how == "stalled" else 30.0
    monkeypatch.setattr(encoders_module, "FINISH_TIMEOUT", wait)
    monkeypatch.setattr(recorder_module, "SAVE_TIMEOUT", wait)  # save_episode's wait for stalled encoders
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, TWO_CAMERAS, root=root)
    lengths = (30, 2)
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(_two_camera_frame(e, i))
            if (e, i) == (0, 0):
                processes = ds.writer._encoder.processes
                if how == "stalled":
                    for p in processes:
                        os.kill(p.pid, signal.SIGSTOP)
        ds.save_episode()
        if how == "killed" and e == 0:  # as it encodes episode 0 (or before, or after: the kill lands anywhere)
            os.kill(processes[0].pid, signal.SIGKILL)
    ds.finalize()
    assert all(p.process.returncode is not None for p in processes)
    made = len(list((root / SEGMENTS).glob("[!.]*.mp4")))
    assert made == 4 and not list((root / SEGMENTS).glob(".*"))
    # stalled: both cameras lacked segments, made in parallel before LeRobot's files were written (none encoded
    # there); killed: the episodes its encoder (one process for both cameras) had not made, encoded there
    assert encodes == [] if how == "stalled" else len(encodes) <= 4
    want = export_module.to_lerobot(root, tmp_path / "fresh", progress=False)
    got, fresh = _decoded_videos(root), _decoded_videos(want)
    assert set(got) == {"observation.images.cam", "observation.images.top"} and set(fresh) == set(got)
    for key in got:
        assert len(got[key]) == sum(lengths) and all(np.array_equal(a, b) for a, b in zip(got[key], fresh[key],
                                                                                          strict=True)), key
    stamp = (root / "meta" / "info.json").stat().st_mtime_ns
    ds.finalize()
    LeRobotDataset.resume(REPO_ID, root=root).finalize()
    assert (root / "meta" / "info.json").stat().st_mtime_ns == stamp
    _same_as_recorded(_reference()(REPO_ID, root=root), lengths)


def test_cancel_pending_videos_drops_only_the_episode_in_progress(tmp_path):
    """cancel_pending_videos (LeRobot's VideoEncodingManager calls it when recording fails) drops the encoder's
    work on the episode in progress, as LeRobot's: the encoder keeps running and encodes the episodes saved after
    it; the buffered frames stay until cleared, as LeRobot's."""
    from lerobot_zarr.writing.segments import SEGMENTS

    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=tmp_path / "ds", streaming_encoding=True)
    encoder = ds.writer._encoder
    for i in range(3):
        ds.add_frame(_frame(0, i))
    ds.save_episode()
    ds.add_frame(_frame(1, 0))
    ds.writer.cancel_pending_videos()
    assert ds.has_pending_frames() and ds.writer._encoder is encoder
    assert all(p.process.poll() is None for p in encoder.processes)
    ds.writer.cleanup_interrupted_episode(1)
    for i in range(2):
        ds.add_frame(_frame(1, i))
    ds.save_episode()
    assert encoder.flush() is True
    assert len(list((tmp_path / "ds" / SEGMENTS).glob("*.mp4"))) == 2
    ds.finalize()
    _same_as_recorded(_reference()(REPO_ID, root=tmp_path / "ds"), (3, 2))


IMAGE_FEATURES = {**FEATURES, "observation.images.wrist": {"dtype": "image", "shape": (24, 32, 3),
                                                            "names": ["height", "width", "channels"]}}


def _image_frame(e: int, i: int) -> dict:
    rng = np.random.default_rng(e * 1000 + i)
    return {**_frame(e, i), "observation.images.wrist": rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)}


def test_finalize_leaves_a_lerobot_dataset_at_root_that_lerobot_and_its_tools_read(tmp_path):
    """After finalize, root is a LeRobot v3.0 dataset as LeRobot's recorder leaves it: LeRobot's class reads it
    (numbers and PNG images exactly, videos as encoded), the drop-in opened on root still reads the store (not a
    conversion of those files) with LeRobot's episode table of them, and LeRobot's delete_episodes runs on it. A
    second finalize writes nothing; resume + a new episode + finalize refreshes the files."""
    from lerobot.datasets.dataset_tools import delete_episodes

    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, IMAGE_FEATURES, root=root)
    assert json.loads((root / "meta" / "info.json").read_text())["total_episodes"] == 0  # as LeRobot's create
    for e, n in enumerate((3, 2, 4)):
        for i in range(n):
            ds.add_frame(_image_frame(e, i))
        ds.save_episode()
    ds.finalize()
    theirs = _reference()(REPO_ID, root=root)
    assert len(theirs) == 9 and theirs.meta.total_episodes == 3
    ours = LeRobotDataset(REPO_ID, root=root)
    assert Path(ours.dataset.root) == root  # the store itself, not a store made of the LeRobot files
    for index in range(9):
        a, b = theirs[index], ours[index]
        for key in ("observation.state", "action", "observation.images.wrist", "episode_index", "frame_index",
                    "index", "task_index", "timestamp"):
            assert torch.equal(a[key], b[key]), (index, key)
        assert a["task"] == b["task"]
        assert float((a["observation.images.cam"] - b["observation.images.cam"]).abs().mean()) < 0.02
    for meta in (ours.meta, ds.meta):  # LeRobot's file locations of the files beside the store
        assert list(meta.episodes["data/file_index"]) == list(theirs.meta.episodes["data/file_index"])
    smaller = delete_episodes(ds, episode_indices=[1], output_dir=tmp_path / "smaller", repo_id="someone/smaller")
    kept = _reference()("someone/smaller", root=tmp_path / "smaller")
    assert kept.meta.total_episodes == 2 and len(kept) == 7 and smaller.meta.total_episodes == 2
    assert kept[3]["observation.state"].tolist() == [2, 0, 200]

    stamp = (root / "meta" / "info.json").stat().st_mtime_ns
    again = LeRobotDataset.resume(REPO_ID, root=root)
    again.finalize()  # no new episode: the files stay as they are
    assert (root / "meta" / "info.json").stat().st_mtime_ns == stamp
    more = LeRobotDataset.resume(REPO_ID, root=root)
    more.add_frame(_image_frame(3, 0))
    more.save_episode()
    assert _reference()(REPO_ID, root=root).meta.total_episodes in (3, 4)  # of one commit or the next, whole
    more.finalize()
    refreshed = _reference()(REPO_ID, root=root)  # (its frames: LeRobot's decoders of this process are cached)
    assert len(refreshed) == 10 and refreshed.meta.total_episodes == 4
    assert refreshed.hf_dataset[9]["observation.state"].tolist() == [3, 0, 300]


def test_without_cameras_each_save_episode_leaves_lerobots_files_of_its_commit(tmp_path):
    """As LeRobot's recorder (its test_save_episode_writes_parquet): once save_episode returns, root holds LeRobot's
    data file and metadata of that commit, which LeRobot 0.6.1 reads, before finalize. They grow: a data file that
    the next episodes no longer fit in is kept as it was written (the same file, not written again), and every file
    is the bytes a fresh export of the store makes (to_lerobot)."""
    from lerobot_zarr.writing.export import to_lerobot

    features = {"observation.state": {"dtype": "float32", "shape": (3000,), "names": None}}
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=root)
    ds.meta.update_chunk_settings(data_files_size_in_mb=1)
    rng = np.random.default_rng(3)
    values = [rng.random((40, 3000), dtype=np.float32) for _ in range(4)]  # ~0.5 MB an episode: 2 a file
    first = None
    for e, episode in enumerate(values):
        for row in episode:
            ds.add_frame({"observation.state": row, "task": f"task {e % 2}"})
        ds.save_episode()
        assert list((root / "data").rglob("*.parquet"))
        theirs = _reference()(REPO_ID, root=root)
        assert theirs.meta.total_episodes == e + 1 and len(theirs) == 40 * (e + 1)
        assert theirs.hf_dataset[40 * e + 39]["observation.state"].tolist() == episode[39].tolist()
        if e == 1:
            first = (root / "data/chunk-000/file-000.parquet").stat().st_ino
    assert (root / "data/chunk-000/file-001.parquet").is_file()
    assert (root / "data/chunk-000/file-000.parquet").stat().st_ino == first  # closed: linked, not rewritten
    fresh = to_lerobot(root, tmp_path / "fresh", progress=False, data_files_size_in_mb=1)
    for path in sorted(p for p in fresh.rglob("*") if p.is_file() and p.name != "README.md"):
        rel = path.relative_to(fresh)
        assert (root / rel).read_bytes() == path.read_bytes(), rel
    ds.finalize()


def test_files_beside_follow_each_saved_episode_and_finalize_has_no_export_left(tmp_path, monkeypatch):
    """With video cameras, the files beside the store are made in the background after each save_episode, once its
    encoders made the episode's segments: they become those of each commit (never half-written: LeRobot 0.6.1 reads
    them at every step), and finalize then has nothing left to export (no episode's rows or stats computed, no file
    written). The cameras' stats (from each frame's histogram as it was recorded) are LeRobot's of the frames."""
    from lerobot_zarr.writing import export
    from lerobot_zarr.lerobot.format import image_stats
    from lerobot_zarr.writing.export import exported_state

    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    lengths = (4, 3, 5)
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
        _wait_until(lambda e=e: (exported_state(root) or {}).get("episodes") == e + 1,
                    f"the files beside of episode {e}")
        theirs = _reference()(REPO_ID, root=root)
        assert theirs.meta.total_episodes == e + 1 and len(theirs) == sum(lengths[:e + 1])
        assert theirs[len(theirs) - 1]["observation.state"].tolist() == _frame(e, n - 1)["observation.state"].tolist()
        frames = np.stack([_frame(e, i)["observation.images.cam"] for i in range(n)])
        import pyarrow.parquet as pq

        stats = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()[e]
        for name, want in image_stats(frames).items():
            np.testing.assert_array_equal(np.asarray(stats[f"stats/observation.images.cam/{name}"],
                                                     dtype=np.float64).reshape(-1),
                                          np.asarray(want, dtype=np.float64).reshape(-1), err_msg=name)
    calls = []
    for name in ("_episode_rows", "_write"):
        real = getattr(export, name)
        monkeypatch.setattr(export, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    ds.finalize()
    assert calls == []
    assert _reference()(REPO_ID, root=root).meta.total_episodes == 3


def test_files_a_lerobot_tool_changed_in_place_are_what_the_drop_in_reads_then(tmp_path):
    """LeRobot's modify_tasks rewrites a finalized recording's files in place: the drop-in opened on root then reads
    them as changed (as LeRobot's class does, with a warning), not the store; ``resume`` refuses before anything is
    recorded, since its finalize could not write the files again without undoing the edit."""
    from lerobot.datasets.dataset_tools import modify_tasks

    from lerobot_zarr.errors import StoreExistsError

    features = {k: v for k, v in FEATURES.items() if k != "observation.images.cam"}
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, features, root=root)
    for e in range(2):
        for i in range(2):
            ds.add_frame({k: v for k, v in _frame(e, i).items() if k != "observation.images.cam"})
        ds.save_episode()
    ds.finalize()
    modify_tasks(ds, new_task="stack the cups")
    with pytest.warns(UserWarning, match="changed since finalize"):
        again = LeRobotDataset(REPO_ID, root=root)
    assert [again[i]["task"] for i in range(4)] == ["stack the cups"] * 4
    assert list(again.meta.tasks.index) == ["stack the cups"]
    with pytest.raises(StoreExistsError, match="changed since"):
        LeRobotDataset.resume(REPO_ID, root=root)
    assert _reference()(REPO_ID, root=root).meta.total_episodes == 2


def test_a_feature_named_as_a_lerobot_folder_is_refused_at_create(tmp_path):
    with pytest.raises(ArgumentError, match="'videos'"):
        LeRobotDataset.create(REPO_ID, 30, {**FEATURES, "videos": {"dtype": "float32", "shape": (1,), "names": None}},
                              root=tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_flush_of_a_stalled_encoder_raises_naming_it(tmp_path):
    """BackgroundEncoder.flush waits while the encoder makes progress; stalled (SIGSTOP) past its timeout it
    raises EncoderTimeoutError naming the store, the pid and what it waited for, and leaves it running."""
    from lerobot_zarr.errors import EncoderTimeoutError

    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=tmp_path / "ds", streaming_encoding=True)
    for i in range(2):
        ds.add_frame(_frame(0, i))
    (encoder,) = ds.writer._encoder.processes
    os.kill(encoder.pid, signal.SIGSTOP)
    try:
        ds.save_episode()
        with pytest.raises(EncoderTimeoutError, match=f"pid {encoder.pid}.*every saved episode") as err:
            encoder.flush(timeout=0.5)
        assert isinstance(err.value, TimeoutError) and str(tmp_path / "ds") in str(err.value)
        assert encoder.process.poll() is None
    finally:
        os.kill(encoder.pid, signal.SIGCONT)
    assert encoder.flush() is True
    ds.finalize()


def test_the_recording_example_runs(tmp_path):
    """examples/record.py records a fake arm and camera at 30 fps with LeRobot's API; the dataset reads back."""
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(tmp_path), SVT_LOG="1")
    run = [sys.executable, str(REPO / "examples" / "record.py"), "--root", str(tmp_path / "ds"), "--episodes", "2",
           "--seconds", "0.2", "--cameras", "1", "--height", "24", "--width", "32"]
    for extra in ([], ["--resume", "--episodes", "1"]):
        proc = subprocess.run(run + extra, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "add_frame: p50" in proc.stdout
    ds = LeRobotDataset("local/fake_arm", root=tmp_path / "ds")
    assert ds.meta.total_episodes == 3 and len(ds) == 18 and ds.meta.robot_type == "fake_arm"
    assert ds[17]["observation.images.cam0"].shape == (3, 24, 32) and ds[17]["task"] == "wave the arm"


# ------------------------------------------------------------------------ videos encoded as episodes are recorded


def _taken(spill) -> int | None:
    """The frames of the episode its streaming encoder took so far (None: it did not start on them)."""
    progress = spill.progress()
    return None if progress is None else progress[0]


def _wait_until(predicate, what: str, timeout: float = 120.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _streams(root: Path) -> list[Path]:
    """The temporary files of episodes being encoded as they are recorded (in progress, not committed)."""
    from lerobot_zarr.writing.segments import SEGMENTS

    folder = root / SEGMENTS
    return list(folder.glob(".stream-*.tmp-*.mp4")) if folder.is_dir() else []


def _named_segments(root: Path) -> set[str]:
    from lerobot_zarr.writing.segments import SEGMENTS

    return {p.name for p in (root / SEGMENTS).glob("[!.]*.mp4")}


def test_clear_episode_buffer_drops_what_the_encoder_encoded_of_the_episode(tmp_path):
    """The encoders encode an episode as it is recorded; clear_episode_buffer drops what they encoded of it (its
    file removed, never a segment), and the episode recorded instead is the one in LeRobot's files."""
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root, streaming_encoding=True)
    for i in range(20):
        ds.add_frame(_frame(9, i))
    _wait_until(lambda: _streams(root), "the encoder to encode the episode being recorded")
    (stream,) = _streams(root)
    ds.clear_episode_buffer()
    _wait_until(lambda: not stream.exists(), "the encoder to drop what it encoded of the cleared episode")
    for i in range(3):
        ds.add_frame(_frame(0, i))
    ds.save_episode()
    ds.writer.flush_pending_videos()
    assert len(_named_segments(root)) == 1 and not _streams(root)
    ds.finalize()
    _same_videos_as_a_fresh_export(root, tmp_path / "fresh", 3)
    _same_as_recorded(_reference()(REPO_ID, root=root), (3,))


def _same_videos_as_a_fresh_export(root: Path, fresh: Path, frames: int) -> None:
    import lerobot_zarr.writing.export as export_module

    want = _decoded_videos(export_module.to_lerobot(root, fresh, progress=False))
    got = _decoded_videos(root)
    assert set(got) == set(want) == {"observation.images.cam"}
    for key in got:
        assert len(got[key]) == frames and all(np.array_equal(a, b) for a, b in zip(got[key], want[key],
                                                                                     strict=True)), key


_STREAMING_RECORDER = """
import os, sys, time
sys.path.insert(0, {tests!r})
from test_lerobot_recording import FEATURES, REPO_ID, _frame
from lerobot_zarr.torch import LeRobotDataset
root, fd = sys.argv[1], int(sys.argv[2])
out = os.fdopen(fd, "w", buffering=1)
ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root, streaming_encoding=True)
for e, n in enumerate((4, 3)):
    for i in range(n):
        ds.add_frame(_frame(e, i))
    ds.save_episode()
for i in range(20):
    ds.add_frame(_frame(2, i))
out.write("pids " + " ".join(str(p.pid) for p in ds.writer._encoder.processes) + "\\n")
time.sleep(600)
"""


def _ended(pid: int) -> bool:
    """Whether process ``pid`` (not this process's child) has exited (gone, or a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="looks at processes in /proc")
def test_a_recorder_killed_while_its_encoders_encode_an_episode_in_progress(tmp_path):
    """SIGKILL of a recorder whose encoders have encoded part of the episode being recorded (after two saved): the
    store reads back the two saved episodes only, no segment of the episode in progress is left under any name
    (the encoders drop it when their recorder's pipe ends), resume records the third episode again and finalize
    gives LeRobot's files whose videos are a fresh export's."""
    root = tmp_path / "ds"
    read, write = os.pipe()
    script = _STREAMING_RECORDER.format(tests=str(REPO / "tests" / "integrations"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", script, str(root), str(write)], pass_fds=(write,), env=env)
    os.close(write)
    try:
        with os.fdopen(read) as lines:
            pids = [int(p) for p in lines.readline().split()[1:]]
        assert pids, f"the recorder ended: {proc.wait()}"
        # the two saved episodes have their segments, and the third (in progress) is being encoded
        _wait_until(lambda: len(_named_segments(root)) == 2 and _streams(root),
                    "the encoder to encode the episode in progress")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    from lerobot_zarr.sampling.dataset import LeRobotZarrDataset
    from lerobot_zarr.writing.segments import wanted_segments

    ds = LeRobotDataset(REPO_ID, root=root)
    assert ds.meta.total_episodes == 2 and len(ds) == 7
    assert [ds[k]["observation.state"].tolist() for k in (0, 6)] == [[0, 0, 0], [1, 2, 102]]
    _wait_until(lambda: all(_ended(p) for p in pids), "the killed recorder's encoders to exit")
    with LeRobotZarrDataset(root) as reader:
        assert _named_segments(root) == wanted_segments(reader)
    assert not _streams(root)
    again = LeRobotDataset.resume(REPO_ID, root=root)
    for i in range(5):
        again.add_frame(_frame(2, i))
    again.save_episode()
    again.finalize()
    _same_videos_as_a_fresh_export(root, tmp_path / "fresh", 12)
    _same_as_recorded(_reference()(REPO_ID, root=root), (4, 3, 5))


def test_a_recorder_dropped_without_finalize_releases_its_threads_and_encoders(tmp_path):
    """A recording dropped without finalize (an exception in the user's loop, say): once collected, its encoder
    processes finish the saved episode's segments and exit, and its threads (spill writer, notify, export) end,
    instead of living until the process exits; the saved episode is kept, and resume goes on."""
    import gc

    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root, streaming_encoding=True)
    for i in range(3):
        ds.add_frame(_frame(0, i))
    ds.save_episode()
    for i in range(2):
        ds.add_frame(_frame(1, i))  # an episode in progress, being streamed to its encoder
    processes = [p.process for p in ds.writer._encoder.processes]
    threads = [t for t in threading.enumerate() if t.name.startswith("lerobot_zarr-")]
    assert processes and {t.name for t in threads} >= {"lerobot_zarr-spill", "lerobot_zarr-notify"}
    del ds
    gc.collect()
    for process in processes:
        assert process.wait(timeout=120) == 0
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), thread.name
    ds = LeRobotDataset.resume(REPO_ID, root=root)
    assert ds.meta.total_episodes == 1 and len(_named_segments(root)) == 1
    ds.finalize()


def test_the_first_export_after_resume_reads_no_earlier_camera_frames(tmp_path, monkeypatch):
    """After resume, LeRobot's files beside the store are exported again from an empty cache: the earlier episodes'
    camera stats are the store's own (kept with each episode), not computed again from their frames read back in
    the recorder's process; the stats are still those of a fresh export (LeRobot's reader on both)."""
    import lerobot_zarr.writing.export as export_module

    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    for e, n in enumerate((4, 3)):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
    ds.finalize()
    computed: list[str] = []
    real = export_module.stats_of_stored

    def spied(spec, feature, name=""):
        stats = real(spec, feature, name)
        return None if stats is None else (lambda values: (computed.append(name), stats(values))[1])

    monkeypatch.setattr(export_module, "stats_of_stored", spied)
    ds = LeRobotDataset.resume(REPO_ID, root=root)
    for i in range(2):
        ds.add_frame(_frame(2, i))
    ds.save_episode()
    ds.finalize()
    assert "observation.images.cam" not in computed and "observation.state" in computed  # (the spy sees them)
    fresh = export_module.to_lerobot(root, tmp_path / "fresh", progress=False)
    ours, want = _reference()(REPO_ID, root=root).meta.stats, _reference()(REPO_ID, root=fresh).meta.stats
    assert set(ours) == set(want)
    for key in want:
        assert set(ours[key]) == set(want[key]), key
        for name in want[key]:
            np.testing.assert_array_equal(np.asarray(ours[key][name]), np.asarray(want[key][name]), err_msg=key)


@pytest.mark.parametrize("mode", [{}, {"streaming_encoding": True, "encoder_threads": 1}])
def test_save_episode_returns_with_its_videos_and_finalize_only_closes(tmp_path, monkeypatch, mode):
    """As LeRobot's save_episode, the drop-in's returns with the episode's videos made: its segment is there and
    LeRobot's files beside the store are those of its commit (LeRobot reads its last frame) at once; finalize then
    exports nothing, encodes nothing, and its encoders exit without further work."""
    from lerobot_zarr.writing import export
    from lerobot_zarr.writing.export import exported_state

    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root, **mode)
    lengths = (5, 3)
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
        assert len(_named_segments(root)) == e + 1 and (exported_state(root) or {}).get("episodes") == e + 1
        theirs = _reference()(REPO_ID, root=root)
        assert theirs[len(theirs) - 1]["observation.state"].tolist() == _frame(e, n - 1)["observation.state"].tolist()
    processes = list(ds.writer._encoder.processes)
    calls = []
    for name in ("_episode_rows", "_write", "lacking_cameras"):
        real = getattr(export, name)
        monkeypatch.setattr(export, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    ds.finalize()
    assert calls == []
    # told to exit, not waited for by finalize: reaped by a thread of their own (no zombie, no pipe left open)
    _wait_until(lambda: all(p.process.returncode is not None and p.process.stdout.closed for p in processes),
                "the encoders to be reaped", timeout=60)
    assert [p.process.returncode for p in processes] == [0] and all(p.process.stdin.closed for p in processes)
    assert not [p.pid for p in processes if _zombie(p.pid)]
    _same_as_recorded(_reference()(REPO_ID, root=root), lengths)


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` is a zombie (a child exited and not waited for)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return False


def test_save_episode_after_one_that_timed_out_waits_for_its_own_videos(tmp_path, monkeypatch, caplog):
    """A save_episode whose encoder made no progress for SAVE_TIMEOUT s returns without its videos, warning; the
    encoder's late reply to it never answers the next save_episode, which waits for its own episode's videos (here
    the encoder stopped again: it warns in turn, its episode known not encoded), each camera's reply counted."""
    import logging
    import select

    import lerobot_zarr.integrations.lerobot_recorder as recorder_module

    monkeypatch.setattr(recorder_module, "SAVE_TIMEOUT", 1.0)
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=root)
    ds.add_frame(_frame(0, 0))
    spill = ds.writer._spills["observation.images.cam"]
    _wait_until(lambda: _taken(spill) == 1, "the encoder to encode the episode's first frame")
    (encoder,) = ds.writer._encoder.processes
    for e, n in enumerate((5, 6)):
        os.kill(encoder.pid, signal.SIGSTOP)
        try:
            for i in range(int(e == 0), n):
                ds.add_frame(_frame(e, i))
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger=recorder_module.__name__):
                ds.save_episode()
            assert any("made no progress" in r.getMessage() and "returns without this episode's videos"
                       in r.getMessage() for r in caplog.records), e
            assert not ds.writer._all_encoded and len(_named_segments(root)) == e
        finally:
            os.kill(encoder.pid, signal.SIGCONT)
        if e == 0:  # its late reply to the first save_episode is written, not read
            _wait_until(lambda: select.select([encoder.process.stdout], [], [], 0)[0], "the encoder's late reply")
    ds.finalize()
    assert len(_named_segments(root)) == 2
    _same_as_recorded(_reference()(REPO_ID, root=root), (5, 6))


def test_streaming_add_frame_waits_for_an_encoder_behind_frames_given_faster_than_fps(tmp_path, monkeypatch, caplog):
    """With streaming_encoding and frames given faster than the fps (not a camera's pace), add_frame waits while
    the encoder is behind (more than 2 frames: at most 0.8 of a frame period; more than encoder_queue_maxsize: until
    it is not, as LeRobot's queue makes it wait, none dropped): when it returns, the frames added minus those
    encoded are at most encoder_queue_maxsize; an encoder making no progress (SIGSTOP) is waited for
    KEEP_UP_TIMEOUT s only, logged; the episode is whole."""
    import logging

    import lerobot_zarr.integrations.lerobot_recorder as recorder_module

    monkeypatch.setattr(recorder_module, "_AHEAD_S", -1e9)  # every frame ahead of the fps: each add_frame may wait
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 10, FEATURES, root=root, streaming_encoding=True, encoder_queue_maxsize=3)
    ds.add_frame(_frame(0, 0))
    ds.save_episode()  # (the encoder started)
    ds.add_frame(_frame(1, 0))
    spill = ds.writer._spills["observation.images.cam"]
    _wait_until(lambda: _taken(spill) == 1, "the encoder to encode the episode's first frame")
    behind = []
    monkeypatch.setattr(recorder_module, "KEEP_UP_TIMEOUT", 300.0)  # (running: never taken for stalled under load)
    for i in range(1, 30):  # the encoder running: waited for (within KEEP_UP_TIMEOUT of progress)
        ds.add_frame(_frame(1, i))
        behind.append(i + 1 - _taken(spill))
    assert not ds.writer._unpaced and max(behind) <= 3, behind
    monkeypatch.setattr(recorder_module, "KEEP_UP_TIMEOUT", 0.5)
    (encoder,) = ds.writer._encoder.processes
    os.kill(encoder.pid, signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING, logger=recorder_module.__name__):
            for i in range(30, 40):
                ds.add_frame(_frame(1, i))
        assert ds.writer._unpaced and any("made no progress" in r.getMessage() for r in caplog.records)
        assert 40 - _taken(spill) > 3  # no longer waited for
    finally:
        os.kill(encoder.pid, signal.SIGCONT)
    ds.save_episode()
    ds.finalize()
    _same_as_recorded(_reference()(REPO_ID, root=root), (1, 40))


def test_streaming_add_frame_waits_for_frames_given_faster_than_the_fps_not_at_a_cameras_pace(tmp_path, monkeypatch):
    """add_frame's wait for the streaming encoders is looked at only for frames given faster than the fps over
    the last second: frames as fast as they go are (from their first few); frames given as lerobot-record's loop
    gives them (each at least a frame period after the one before) are not, even after a slow first one (a
    camera's first read, a policy's first call)."""
    import time

    import lerobot_zarr.integrations.lerobot_recorder as recorder_module

    looks: list[int] = []
    monkeypatch.setattr(recorder_module.Recorder, "_keep_up", lambda self, frames: looks.append(frames))
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root=tmp_path / "ds", streaming_encoding=True)
    for i in range(30):  # as fast as they go (a look from the 5th, once 0.1 s ahead of 30 fps: by the 12th with
        ds.add_frame(_frame(0, i))  # add_frame taking up to 30 ms, as beside busy processes)
    ds.save_episode()
    assert looks and min(looks) <= 12, looks
    looks.clear()
    for i in range(40):
        begun = time.monotonic()
        time.sleep(0.3 if i == 0 else 0.005)  # the loop's work before add_frame (observation, policy)
        ds.add_frame(_frame(1, i))
        time.sleep(max(0.0, begun + 1 / 30 - time.monotonic()))  # lerobot-record's busy_wait to the period
    ds.save_episode()
    assert looks == []
    ds.finalize()
    _same_as_recorded(_reference()(REPO_ID, root=tmp_path / "ds"), (30, 40))


def test_one_encoder_process_encodes_every_camera_as_recorded(tmp_path):
    """The background encoders of a recording with two video cameras are one process (one interpreter's start,
    one store opening per commit), each camera encoded by a thread of its own as its frames come; every saved
    episode's videos of both cameras are made when save_episode returns, and decode as a fresh export's."""
    root = tmp_path / "ds"
    ds = LeRobotDataset.create(REPO_ID, 30, TWO_CAMERAS, root=root, streaming_encoding=True)
    lengths = (6, 4)
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(_two_camera_frame(e, i))
        (process,) = ds.writer._encoder.processes
        assert sorted(process.cameras) == ["observation.images.cam", "observation.images.top"]
        ds.save_episode()
        assert len(_named_segments(root)) == 2 * (e + 1)
    ds.finalize()
    import lerobot_zarr.writing.export as export_module

    want = _decoded_videos(export_module.to_lerobot(root, tmp_path / "fresh", progress=False))
    got = _decoded_videos(root)
    assert set(got) == set(want) == {"observation.images.cam", "observation.images.top"}
    for key in got:
        assert len(got[key]) == sum(lengths) and all(np.array_equal(a, b) for a, b in zip(got[key], want[key],
                                                                                          strict=True)), key


def test_a_recording_at_a_relative_root(tmp_path, monkeypatch):
    """root given as a relative path (as a script run from its folder gives it): the episodes are saved (the
    spill's frames taken into the store: its path was absolute, the root's not, and the commit refused it as
    outside the store), resumed and read back by LeRobot."""
    monkeypatch.chdir(tmp_path)
    ds = LeRobotDataset.create(REPO_ID, 30, FEATURES, root="ds", streaming_encoding=True)
    for i in range(4):
        ds.add_frame(_frame(0, i))
    ds.save_episode()
    ds.finalize()
    ds = LeRobotDataset.resume(REPO_ID, root="ds")
    for i in range(3):
        ds.add_frame(_frame(1, i))
    ds.save_episode()
    ds.finalize()
    _same_as_recorded(_reference()(REPO_ID, root=tmp_path / "ds"), (4, 3))
