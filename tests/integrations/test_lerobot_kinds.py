"""Every kind of feature LeRobot 0.6.1 records, read by ``open_dataset`` exactly as LeRobot's own ``LeRobotDataset``
reads the same folder (tests/lerobot_recorded.py records them with LeRobot's API), and exported back so that LeRobot
loads equal values. Skipped without lerobot.

Ours are numpy in the stored dtypes; LeRobot's are torch tensors cast by its ``hf_transform_to_torch`` (integers
int64, floats float32). So each value is compared after the same cast, with ``==`` (cameras and depth maps as
float32 CHW, ``image_format="float32_chw"``), LeRobot with its default video backend (torchcodec here; PyAV for
depth). Where LeRobot cannot decode a frame (its concatenated HEVC files: frames after a keyframe refer to pictures
before it), ours is compared with an independent full decode of the file.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="comparing with LeRobot needs torch")
pytest.importorskip("lerobot", reason="lerobot is not installed: LeRobotDataset was not compared")

from lerobot_recorded import FPS, KINDS, REPO_ID, lerobot_recorded  # noqa: E402, F401

import lerobot_zarr  # noqa: E402
from lerobot_zarr.lerobot.format import DEFAULT_FEATURES  # noqa: E402

TEXT = ("string", "language")
DELTAS = [-2 / FPS, -1 / FPS, 0.0, 1 / FPS]


def theirs_dataset(folder, **kwargs):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    logging.disable(logging.WARNING)
    try:
        return LeRobotDataset(REPO_ID, root=folder, **kwargs)
    finally:
        logging.disable(logging.NOTSET)


def ours_dataset(folder, store, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lerobot_zarr.LeRobotZarrWarning)
        ds = lerobot_zarr.open_dataset(folder, root=store, image_format="float32_chw", progress=False, **kwargs)
    # nothing left out, nothing to warn of; but colour frames in a depth feature, served as LeRobot serves them
    said = [str(w.message) for w in caught if issubclass(w.category, lerobot_zarr.LeRobotZarrWarning)]
    assert not [m for m in said if not (folder.name == "depth_image_rgb" and "is declared a depth map" in m)], said
    return ds


def windowed(meta) -> dict[str, list[float]]:
    """A window on every feature LeRobot can window (not text: LeRobot stacks tensors; not the five it adds:
    it reads them as scalars)."""
    return {k: DELTAS for k, ft in meta.features.items() if ft["dtype"] not in TEXT and k not in DEFAULT_FEATURES}


def full_decode(path, depth: bool) -> dict[float, np.ndarray]:
    """Every frame of an mp4, decoded from its first frame with PyAV, by timestamp (the reference where LeRobot's own
    seeking decoder cannot give a frame)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return {round(float(f.time), 4): f.to_ndarray(format="gray12le" if depth else "rgb24")
                for f in container.decode(stream)}


def assert_same_value(key, theirs, ours, where) -> None:
    if isinstance(theirs, torch.Tensor):
        want = theirs.numpy()
        got = np.asarray(ours)
        assert got.shape == want.shape, (where, key, got.shape, want.shape)
        if want.dtype != got.dtype:
            assert want.dtype in (np.int64, np.float32, np.bool_), (where, key, want.dtype)
            got = got.astype(want.dtype)
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), (where, key, got, want)
    else:
        assert type(ours) is type(theirs) and ours == theirs, (where, key, ours, theirs)


def compare(theirs, ours, decoded=None) -> int:
    """Every item of ``theirs`` against ``ours``; an item LeRobot cannot decode is checked against ``decoded``
    (camera -> {seconds in the file: frame}). Returns how many items LeRobot could not give."""
    from lerobot.datasets.video_utils import FrameTimestampError

    assert len(theirs) == len(ours)
    skipped = 0
    for i in range(len(ours)):
        got = ours[i]
        try:
            want = theirs[i]
        except (FrameTimestampError, RuntimeError):  # torchcodec: "no more frames left to decode"
            assert decoded, f"LeRobot cannot decode item {i}"
            skipped += 1
            check_against_decode(ours, i, got, decoded)
            continue
        assert set(got) == set(want), (i, set(got) ^ set(want))
        for key in want:
            assert_same_value(key, want[key], got[key], f"item {i}")
    return skipped


def check_against_decode(ds, i, item, decoded) -> None:
    """Item ``i`` (without windows) of ours against a full decode of its video files."""
    from lerobot_zarr.cameras.depth import DepthOutput

    e, t = int(item["episode_index"]), float(item["timestamp"])
    for key, frames in decoded.items():
        got = np.asarray(item[key])
        if got.ndim == 4:  # a window: the frame at offset 0
            got = got[DELTAS.index(0.0)]
        frame = frames[round(from_timestamp(ds, key, e) + t, 4)]
        if key in ds.meta.depth_keys:
            want = DepthOutput(ds.meta.features[key], "video", ds.depth_unit)(frame[..., None])
        else:
            want = frame.astype(np.float32) / np.float32(255)
        assert np.array_equal(np.moveaxis(got, -3, -1), want), (i, key)


def from_timestamp(ds, key, e) -> float:
    """Where episode ``e`` starts in its video file of camera ``key`` (the source's episode table)."""
    import pyarrow.parquet as pq

    table = pq.read_table(f"{ds.meta.source['path']}/meta/episodes/chunk-000/file-000.parquet",
                          columns=["episode_index", f"videos/{key}/from_timestamp"]).to_pylist()
    return next(r[f"videos/{key}/from_timestamp"] for r in table if r["episode_index"] == e)


def video_references(folder, ds) -> dict:
    from pathlib import Path

    out = {}
    for key, ft in ds.meta.features.items():
        if ft["dtype"] == "video":
            (path,) = sorted(Path(folder, "videos", key).rglob("*.mp4"))
            out[key] = full_decode(path, key in ds.meta.depth_keys)
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_items_equal_lerobots(kind, lerobot_recorded, tmp_path):  # noqa: F811
    folder = lerobot_recorded(kind)
    ours = ours_dataset(folder, tmp_path / "store")
    theirs = theirs_dataset(folder)
    decoded = video_references(folder, ours)
    skipped = compare(theirs, ours, decoded)
    assert kind in ("video_hevc", "depth_video_log", "depth_video_linear") or not skipped
    # windows on every feature LeRobot windows, with their _is_pad
    deltas = windowed(ours.meta)
    ours_w = ours_dataset(folder, tmp_path / "store", delta_timestamps=deltas)
    theirs_w = theirs_dataset(folder, delta_timestamps=deltas)
    compare(theirs_w, ours_w, decoded)


DEPTH_KINDS = [k for k in KINDS if k.startswith("depth_")]


@pytest.mark.parametrize("kind", DEPTH_KINDS)
@pytest.mark.parametrize("unit", ["mm", "m"])
def test_depth_in_either_unit_and_its_stats(kind, unit, lerobot_recorded, tmp_path):  # noqa: F811
    folder = lerobot_recorded(kind)
    ours = ours_dataset(folder, tmp_path / "store", depth_unit=unit)
    theirs = theirs_dataset(folder, depth_output_unit=unit)
    assert ours.meta.depth_keys == theirs.meta.depth_keys == ["observation.images.depth"]
    compare(theirs, ours, video_references(folder, ours))
    for key in ours.meta.depth_keys:
        for name, value in theirs.meta.stats[key].items():
            assert np.array_equal(np.asarray(ours.meta.stats[key][name]), value), (key, name)
    # the batch path gives what the items give
    batch = ours.get_batch(np.arange(len(ours)))
    for i in (0, len(ours) - 1):
        assert np.array_equal(batch["observation.images.depth"][i], ours[i]["observation.images.depth"])


def test_colour_frames_in_a_depth_feature_are_served_as_lerobots_with_a_warning(lerobot_recorded,  # noqa: F811
                                                                                 tmp_path):
    """LeRobot records 8-bit RGB frames into a depth image feature and serves them as colour (pixels / 255), its
    stats as recorded: so do we (items and stats in either unit: test_depth_in_either_unit_and_its_stats), saying
    so when the store is made and when it is opened."""
    folder = lerobot_recorded("depth_image_rgb")
    for store in ("a", "b"):
        with pytest.warns(lerobot_zarr.LeRobotZarrWarning) as caught:
            ds = lerobot_zarr.open_dataset(folder, root=tmp_path / store, progress=False)
        said = [str(w.message) for w in caught]
        assert any("'observation.images.depth' is declared a depth map (uint16, mm) but its frames are 8-bit RGB"
                   in m for m in said), said
        assert any("'observation.images.depth' is declared a depth map but holds 8-bit colour images" in m
                   for m in said), said
    assert ds.meta.depth_keys == ["observation.images.depth"] and "observation.images.depth" not in ds.left_out
    frame = ds[0]["observation.images.depth"]
    assert frame.dtype == np.float32 and frame.shape == (6, 8, 3) and 0 < frame.max() <= 1


@pytest.mark.parametrize("kind", list(KINDS))
def test_export_loads_in_lerobot_with_equal_values(kind, lerobot_recorded, tmp_path):  # noqa: F811
    """``to_lerobot`` writes every kind back as LeRobot does; LeRobot loads it and gives ours (which equal its items
    of the source, above). Colour videos are kept as the source's mp4 (a re-encode is lossy); depth videos are
    re-encoded losslessly from the stored codes, with the quantizer's keys."""
    folder = lerobot_recorded(kind)
    rgb_video = kind.startswith("video_") or kind in ("task_switch", "one_frame", "no_tasks_table")
    ours = ours_dataset(folder, tmp_path / "store", **({"storage": "mp4"} if rgb_video else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", lerobot_zarr.LeRobotZarrWarning)
        out = ours.to_lerobot(tmp_path / "export", progress=False)
    back = theirs_dataset(out)
    skipped = compare(back, ours, video_references(out, ours))
    assert kind == "video_hevc" or not skipped  # (the source's HEVC file, copied: LeRobot cannot seek in it)
    source = theirs_dataset(folder)
    assert back.meta.depth_keys == source.meta.depth_keys
    for key in source.meta.depth_keys:
        keys = {k for k in source.meta.features[key]["info"] if not k.startswith("video.") or "depth" in k
                or k in ("video.use_log", "video.shift")}
        assert {k: back.meta.features[key]["info"][k] for k in keys} == {
            k: source.meta.features[key]["info"][k] for k in keys}, key
    assert back.meta.info.get("tools") == source.meta.info.get("tools")


@pytest.mark.parametrize("kind", ["string", "language", "nd", "depth_video_log", "depth_image_float32"])
def test_push_to_the_test_hub_then_lerobot_downloads_equal_values(kind, lerobot_recorded, tmp_path, monkeypatch):  # noqa: F811
    from hub_fixtures import make_env

    from lerobot_zarr.testing.hub_server import HubServer

    folder = lerobot_recorded(kind)
    ours = ours_dataset(folder, tmp_path / "store")
    with HubServer(tmp_path / "server", tokens={"tok": "me"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        assert ours.push(f"me/{kind}", token="tok", progress=False) is not None
        monkeypatch.setenv("HF_TOKEN", "tok")
        back = theirs_dataset_from_hub(f"me/{kind}", tmp_path / "download")
        assert not compare(back, ours, video_references(back.root, ours))
        assert server.errors == []


def theirs_dataset_from_hub(repo_id, root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    logging.disable(logging.WARNING)
    try:
        return LeRobotDataset(repo_id, root=root)
    finally:
        logging.disable(logging.NOTSET)


def test_depth_video_kept_as_mp4_equals_lerobots(lerobot_recorded, tmp_path):  # noqa: F811
    """A depth camera kept as LeRobot's own HEVC files (``storage="mp4"``, decoded on read as 12-bit codes, open
    GOPs and all) gives LeRobot's items, in windows and batches, and exports as the source's files that LeRobot
    loads with equal values."""
    folder = lerobot_recorded("depth_video_log")
    key = "observation.images.depth"
    deltas = {key: DELTAS}
    ours = ours_dataset(folder, tmp_path / "store", storage={key: "mp4"}, delta_timestamps=deltas)
    assert ours.array_specs[key].storage == "mp4"
    decoded = video_references(folder, ours)
    skipped = compare(theirs_dataset(folder, delta_timestamps=deltas), ours, decoded)
    assert skipped < len(ours)  # LeRobot decodes most items (not those its seek cannot: checked against the file)
    batch = ours.get_batch(np.arange(len(ours))[::-1])
    for i in range(len(ours)):
        assert np.array_equal(batch[key][len(ours) - 1 - i], ours[i][key]), i
    out = ours.to_lerobot(tmp_path / "export", progress=False)
    compare(theirs_dataset(out, delta_timestamps=deltas), ours, decoded)
