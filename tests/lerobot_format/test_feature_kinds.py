"""Every kind of feature LeRobot writes, without lerobot: synthetic v3.0 sources (``write_sample_dataset`` with
text features, N-D features, depth images, 12-bit depth videos, no ``tasks`` column) read by ``open_dataset`` and
compared with the values the generator wrote (its documented functions) and with independent references: LeRobot's
dequantization written out per value, a full PyAV decode. Then the store's other paths: windows and batches, zarr's
own reader, verify, edits, export and reopen. (tests/integrations/test_lerobot_kinds.py compares with LeRobot
itself, where it is installed.)"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest

import lerobot_zarr
from lerobot_zarr.errors import ReadOnlyStoreError, SchemaMismatchError
from lerobot_zarr.testing.sample_data import (
    NOTE_KEY,
    depth_codes,
    depth_image,
    language_of,
    note_of,
    write_sample_dataset,
)

FPS = 10
LENGTHS = [3, 1, 4]
SHAPE = (16, 24, 3)
DEPTH = "observation.images.depth"
DEPTH_VIDEO = "observation.images.depth_video"
LANGUAGE = ("language_persistent", "language_events")


def open_quiet(source, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", lerobot_zarr.LeRobotZarrWarning)  # nothing is left out
        return lerobot_zarr.open_dataset(source, progress=False, **kwargs)


@pytest.fixture(scope="module")
def source(module_tmp):
    pytest.importorskip("av", reason="depth videos need PyAV")
    return write_sample_dataset(module_tmp / "src", n_episodes=3, lengths=LENGTHS, fps=FPS, state_dim=2,
                                action_dim=2, extra_nd=True, image_shape=SHAPE, text_features=True,
                                depth_keys=(DEPTH,), depth_video_keys=(DEPTH_VIDEO,), write_videos=True,
                                episode_tasks=False)


@pytest.fixture(scope="module")
def store(source, module_tmp):
    return open_quiet(source, root=module_tmp / "store").root


def frames():
    return [(e, i) for e, n in enumerate(LENGTHS) for i in range(n)]


def dequantize(code: int, unit: str) -> np.float32:
    """LeRobot's dequantize_depth of one 12-bit code, its default log quantizer, written out step by step in float32
    (its torch path), exp correctly rounded (torch is not imported here)."""
    depth_min, depth_max, shift = 0.01, 10.0, 3.5
    log_min, log_max = math.log(depth_min + shift), math.log(depth_max + shift)
    x = np.float32(np.float32(code) * np.float32((log_max - log_min) / 4095)) + np.float32(log_min)
    x = np.float32(np.float32(math.exp(float(np.float32(x)))) - np.float32(shift))
    x = min(max(x, np.float32(depth_min)), np.float32(depth_max))
    if unit == "m":
        return np.float32(x)
    return np.float32(min(max(np.rint(np.float32(x * np.float32(1000))), 0), 65535))


def test_every_kind_reads_as_written(store):
    ds = lerobot_zarr.open_dataset(store, progress=False)
    assert ds.left_out == {}
    assert ds.meta.depth_keys == [DEPTH, DEPTH_VIDEO]
    assert ds.array_specs[DEPTH].dtype == np.uint16 and ds.array_specs[DEPTH_VIDEO].dtype == np.uint16
    assert ds.array_specs[NOTE_KEY].kind == "string" and ds.array_specs["language_events"].kind == "language"
    table = {}
    for k, (e, i) in enumerate(frames()):
        item = ds[k]
        assert item[NOTE_KEY] == note_of(e, i) and type(item[NOTE_KEY]) is str
        for column in LANGUAGE:
            assert item[column] == language_of(column, e, i), (column, e, i)
        assert item["observation.grid"].shape == (3, 4)
        assert item[DEPTH].dtype == np.float32 and item[DEPTH].shape == (16, 24, 1)
        assert np.array_equal(item[DEPTH], depth_image(e, i, (16, 24, 1)).astype(np.float32))
        codes = depth_codes(0, e, i, (16, 24, 1))
        for code in np.unique(codes).tolist():
            table.setdefault(code, dequantize(code, "mm"))
        want = np.vectorize(table.__getitem__, otypes=[np.float32])(codes)
        assert np.array_equal(item[DEPTH_VIDEO], want), (e, i)
        assert item["task"] == ds.meta.tasks[int(item["task_index"])]
    # the episode table had no tasks column: LeRobot's tasks come from the frames
    assert ds.meta.episode_task_index.tolist() == [-1, -1, -1]


def test_depth_in_metres_channel_first_and_the_stats(store, source):
    ds = lerobot_zarr.open_dataset(store, depth_unit="m", image_format="float32_chw", progress=False)
    item = ds[4]  # episode 2, frame 0
    assert item[DEPTH].shape == (1, 16, 24)
    assert np.array_equal(item[DEPTH], depth_image(2, 0, (16, 24, 1))[..., 0][None].astype(np.float32)
                          / np.float32(1000))
    codes = depth_codes(0, 2, 0, (16, 24, 1))[..., 0]
    want = np.vectorize(lambda c: dequantize(c, "m"), otypes=[np.float32])(codes)
    assert np.array_equal(item[DEPTH_VIDEO][0], want)
    recorded = json.loads((source / "meta/stats.json").read_text())[DEPTH]
    assert ds.meta.stats[DEPTH]["mean"] == (np.asarray(recorded["mean"]) * (1 / 1000)).tolist()  # as LeRobot does
    assert ds.meta.stats[DEPTH]["count"] == recorded["count"]
    assert lerobot_zarr.inspect(source, depth_unit="m").stats[DEPTH] == ds.meta.stats[DEPTH]
    with pytest.raises(lerobot_zarr.ArgumentError, match="depth_unit"):
        lerobot_zarr.open_dataset(store, depth_unit="cm", progress=False)


def test_windows_and_batches_of_text_and_depth(store):
    deltas = {NOTE_KEY: [-0.1, 0.0, 0.1], "language_events": [0.0, 0.1], DEPTH_VIDEO: [-0.1, 0.0]}
    ds = lerobot_zarr.open_dataset(store, delta_timestamps=deltas, progress=False)
    item = ds[3]  # episode 1: one frame, padded on both sides
    assert item[NOTE_KEY] == [note_of(1, 0)] * 3 and item[f"{NOTE_KEY}_is_pad"].tolist() == [True, False, True]
    assert item["language_events"] == [language_of("language_events", 1, 0)] * 2
    item = ds[0]
    assert item[NOTE_KEY] == [note_of(0, 0), note_of(0, 0), note_of(0, 1)]
    assert item["language_events"] == [[], language_of("language_events", 0, 1)]
    assert item[DEPTH_VIDEO].shape == (2, 16, 24, 1) and item[f"{DEPTH_VIDEO}_is_pad"].tolist() == [True, False]
    batch = ds.get_batch([5, 0, 3])
    assert batch[NOTE_KEY] == [ds[5][NOTE_KEY], ds[0][NOTE_KEY], ds[3][NOTE_KEY]]
    assert batch["language_persistent"] == [ds[k]["language_persistent"] for k in (5, 0, 3)]
    assert np.array_equal(batch[DEPTH_VIDEO][1], ds[0][DEPTH_VIDEO]) and batch[DEPTH].dtype == np.float32
    # each item is a new object: changing one does not change the next
    ds[0]["language_persistent"][0]["content"] = "changed"
    assert ds[0]["language_persistent"][0]["content"] == "plan of episode 0"


def test_a_dtype_lerobot_does_not_write_is_left_out_alone(source, tmp_path):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(source, src)
    info = json.loads((src / "meta/info.json").read_text())
    info["features"]["observation.odd"] = {"dtype": "complex64", "shape": [1], "names": None}
    (src / "meta/info.json").write_text(json.dumps(info))
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="observation.odd"):
        ds = lerobot_zarr.open_dataset(src, root=tmp_path / "store", progress=False)
    assert "complex64" in ds.left_out["observation.odd"]
    assert "observation.odd" not in ds[0] and ds[0][NOTE_KEY] == note_of(0, 0)


def test_zarr_reads_the_text_arrays_and_frames_are_shared(store):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(store), mode="r")
    notes = group[NOTE_KEY][:]
    assert notes.tolist() == [note_of(e, i) for e, i in frames()]
    persistent = group["language_persistent"][:]
    assert [json.loads(v) for v in persistent.tolist()] == [language_of(LANGUAGE[0], e, i) for e, i in frames()]
    # an episode's persistent rows are written once, whatever its length
    size = sum(f.stat().st_size for f in (store / "language_persistent").rglob("*") if f.is_file()
               and f.name != "zarr.json")
    one = len(json.dumps(language_of(LANGUAGE[0], 0, 0), separators=(",", ":")))
    assert size < 3 * one + 16 * 8 * 2 + 400, size


def test_verify_edit_and_export(store, tmp_path):
    assert lerobot_zarr.open_dataset(store, progress=False).verify(progress=False).ok
    mine = tmp_path / "mine"
    with lerobot_zarr.open_dataset(store.parent / "src", root=mine, mode="r+", progress=False) as ds:
        ds.delete_episodes([0])
        with pytest.raises(ReadOnlyStoreError, match="in place"):
            with ds.edit(0) as frames:
                frames[NOTE_KEY][0] = "x"
        e = ds.add_episode({"observation.state": np.zeros((2, 2), np.float32),
                            "action": np.ones((2, 2), np.float32),
                            "observation.grid": np.zeros((2, 3, 4), np.float32), NOTE_KEY: ["a", "b"],
                            "language_persistent": [[], []],
                            "language_events": [[], [{"role": "user", "content": "hi", "style": "interjection",
                                                      "camera": None, "tool_calls": None}]],
                            DEPTH: np.full((2, 16, 24, 1), 1234, np.uint16),
                            DEPTH_VIDEO: np.full((2, 16, 24, 1), 100, np.uint16)}, task="new")
        ds.delete_frames(1, [0])  # episode 2 of the source, written again into fresh rows
        assert ds[len(ds) - 1][NOTE_KEY] == "b" and ds[len(ds) - 1]["language_events"][0]["content"] == "hi"
        assert ds.verify(progress=False).ok
        assert e == 2 and "mean" in ds.meta.stats[DEPTH]
        ds.drop_features(["language_events"])
        out = ds.to_lerobot(tmp_path / "export", progress=False)
        back = open_quiet(out, root=tmp_path / "back")
        assert len(back) == len(ds)
        for k in range(len(ds)):
            a, b = ds[k], back[k]
            assert a[NOTE_KEY] == b[NOTE_KEY] and a["language_persistent"] == b["language_persistent"]
            assert np.array_equal(a[DEPTH], b[DEPTH]) and np.array_equal(a[DEPTH_VIDEO], b[DEPTH_VIDEO])
            assert np.array_equal(a["observation.grid"], b["observation.grid"])
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"][DEPTH]["info"] == {"is_depth_map": True, "depth_unit": "mm"}
    video = info["features"][DEPTH_VIDEO]["info"]
    assert video["video.codec"] == "hevc" and video["video.pix_fmt"] == "gray12le" and video["video.use_log"]
    assert "language_events" not in info["features"] and info["tools"][0]["function"]["name"] == "say"
    schema = pq.read_schema(out / "data/chunk-000/file-000.parquet")
    assert str(schema.field(NOTE_KEY).type) == "string"


def test_lazy_stream_and_xarray_serve_them_too(source, store, tmp_path):
    eager = lerobot_zarr.open_dataset(store, progress=False)
    lazy = open_quiet(source, root=tmp_path / "lazy", lazy=True)
    for k in (0, 3, 7):
        a, b = eager[k], lazy[k]
        assert a[NOTE_KEY] == b[NOTE_KEY] and a["language_events"] == b["language_events"]
        assert np.array_equal(a[DEPTH_VIDEO], b[DEPTH_VIDEO])
    for where in (source, store):  # from the source's files, and from the store
        items = list(lerobot_zarr.stream(where, shuffle=False, depth_unit="m"))
        assert [item[NOTE_KEY] for item in items] == [note_of(e, i) for e, i in frames()]
        assert [item["language_persistent"] for item in items] == [language_of(LANGUAGE[0], e, i) for e, i in frames()]
        assert np.array_equal(items[4][DEPTH], depth_image(2, 0, (16, 24, 1)).astype(np.float32) / np.float32(1000))
        batch = next(iter(lerobot_zarr.stream(where, shuffle=False, batch_size=3)))
        assert batch[NOTE_KEY] == [note_of(e, i) for e, i in frames()[:3]] and batch[DEPTH].dtype == np.float32
    pytest.importorskip("xarray")
    x = eager.to_xarray()
    assert x[NOTE_KEY].values.tolist() == [note_of(e, i) for e, i in frames()]
    assert x[DEPTH_VIDEO].dtype == np.uint16  # the stored codes
    from lerobot_zarr.integrations.xarray import lerobot_stats

    assert NOTE_KEY not in lerobot_stats(x) and "observation.grid" in lerobot_stats(x)


def test_info_names_depth_cameras_and_text(source):
    from lerobot_zarr.cli.info import describe, describe_json

    meta = lerobot_zarr.inspect(source)
    summary = describe_json(meta)
    assert summary["features"][DEPTH]["depth"] == "depth map in mm"
    assert "12-bit codes, log quantizer 0.01..10 m" in summary["features"][DEPTH_VIDEO]["depth"]
    assert summary["features"][NOTE_KEY]["status"] == "to store" and meta.depth_keys == [DEPTH, DEPTH_VIDEO]
    assert "12-bit codes" in describe(meta)


def test_what_earlier_versions_stored_wrong_or_not_is_left_out_with_the_fix(tmp_path):
    """Earlier versions stored depth cameras as uint8 frames (8-bit gray) and no string feature: such a store still
    opens, the camera and the strings left out with the reason and what to do rather than served wrong."""
    src = write_sample_dataset(tmp_path / "src", n_episodes=2, lengths=[2, 2], image_keys=("observation.images.d",),
                               image_shape=(4, 6, 1))
    ds = open_quiet(src, root=tmp_path / "store")
    ds.close()
    root = json.loads((tmp_path / "store/zarr.json").read_text())
    attrs = root["attributes"]["lerobot_zarr"]
    attrs["info"]["features"]["observation.images.d"]["info"] = {"is_depth_map": True}
    # and a string feature, which earlier versions did not store
    attrs["info"]["features"]["note"] = {"dtype": "string", "shape": [1], "names": None}
    attrs["not_materialized"]["note"] = "string features are not stored"
    (tmp_path / "store/zarr.json").write_text(json.dumps(root))
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="observation.images.d"):
        ds = lerobot_zarr.open_dataset(tmp_path / "store", progress=False)
    assert "earlier lerobot_zarr" in ds.left_out["observation.images.d"] and "observation.images.d" not in ds[0]
    assert "make the store again" in ds.left_out["note"] and "note" not in ds[0]


def test_mixtures_leave_text_out(store):
    from lerobot_zarr import open_mixture

    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="text"):
        mix = open_mixture({str(store): 1.0}, progress=False)
    assert NOTE_KEY in mix.left_out and NOTE_KEY not in mix.get_batch(np.arange(2))
    assert mix.get_batch(np.arange(2))[DEPTH].dtype == np.float32


def test_recording_text_features(tmp_path):
    features = {"x": {"dtype": "float32", "shape": [2]}, "note": {"dtype": "string", "shape": [1]},
                "language_events": {"dtype": "language", "shape": [1]}}
    with lerobot_zarr.create(tmp_path / "rec", fps=FPS, features=features) as ds:
        for i in range(3):
            ds.add_frame({"x": np.full(2, i, np.float32), "note": f"n{i}",
                          "language_events": language_of("language_events", 0, i)}, task="t")
        ds.save_episode()
        with pytest.raises(SchemaMismatchError, match="not str"):
            ds.add_frame({"x": np.zeros(2, np.float32), "note": 3, "language_events": []}, task="t")
        assert [ds[i]["note"] for i in range(3)] == ["n0", "n1", "n2"]
        assert ds[1]["language_events"] == language_of("language_events", 0, 1) and ds[2]["language_events"] == []
        assert "note" not in ds.meta.stats and "x" in ds.meta.stats


