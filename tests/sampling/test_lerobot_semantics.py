"""ds[i] / ds.get_batch against an independent, naive reference of LeRobot's sampling semantics.

The reference reads the *source* parquet files with pyarrow (never the library) and implements, with plain Python
loops, what ``LeRobotDataset.__getitem__`` does: for frame i of episode [from, to) and each delta d of
``delta_timestamps[key]``: offset = round(d * fps), query = clamp(i + offset, from, to - 1),
``<key>_is_pad`` = i + offset outside [from, to). With ``episodes=[...]`` the dataset holds the frames of the
selected episodes in global index order (LeRobot filters the parquet rows, keeping file order).
"""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import lerobot_zarr
from lerobot_zarr import DeltaTimestampsError, FrameIndexError
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
IMAGE = "observation.images.top"
GRID = "observation.grid"
IMAGE_SHAPE = (6, 8, 3)
N_EPISODES = 14
NUMERIC = ("observation.state", "action", GRID, "timestamp", "frame_index", "episode_index", "index",
           "task_index")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------------------------- reference


class Reference:
    """Every frame of a LeRobot folder, read straight from its parquet files, and LeRobot's item semantics."""

    def __init__(self, root: pathlib.Path):
        files = sorted((root / "data").rglob("*.parquet"))
        self.columns: dict[str, list] = {}
        for file in files:
            table = pq.read_table(file)
            for name in table.column_names:
                self.columns.setdefault(name, []).extend(table.column(name).to_pylist())
        self.n = len(self.columns["index"])
        self.arrays: dict[str, np.ndarray] = {}
        for name in (k for k in NUMERIC if k in self.columns):
            dtype = np.float32 if name in ("observation.state", "action", GRID, "timestamp") else np.int64
            self.arrays[name] = np.array(self.columns[name], dtype=dtype)
        if IMAGE in self.columns:
            self.arrays[IMAGE] = np.stack([np.asarray(Image.open(io.BytesIO(cell["bytes"])))
                                           for cell in self.columns[IMAGE]])
        if (root / "meta" / "tasks.parquet").exists():
            tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pylist()
        else:  # v2.1
            tasks = [json.loads(line) for line in (root / "meta" / "tasks.jsonl").read_text().splitlines()]
        self.tasks = {row["task_index"]: row["task"] for row in tasks}
        # episode boundaries [from, to) in global index, from the episode_index column alone
        self.bounds: dict[int, list[int]] = {}
        for g, e in enumerate(self.columns["episode_index"]):
            assert self.columns["index"][g] == g
            if e not in self.bounds:
                self.bounds[e] = [g, g + 1]
            else:
                assert self.bounds[e][1] == g, "episodes are contiguous"
                self.bounds[e][1] = g + 1
        self.episode_of = list(self.columns["episode_index"])

    def frames(self, episodes=None) -> list[int]:
        """Global indices of the dataset's frames, in LeRobot's order (global index order)."""
        keep = set(self.bounds) if episodes is None else set(episodes)
        return [g for g in range(self.n) if self.episode_of[g] in keep]

    def item(self, frames: list[int], i: int, delta_timestamps=None) -> dict:
        if i < 0:
            i += len(frames)
        assert 0 <= i < len(frames)
        g = frames[i]
        lo, hi = self.bounds[self.episode_of[g]]
        out = {}
        offsets = {key: [round(d * FPS) for d in deltas] for key, deltas in (delta_timestamps or {}).items()}
        for key, values in self.arrays.items():
            if key in offsets:
                rows, pads = [], []
                for off in offsets[key]:
                    q = g + off
                    pads.append(q < lo or q >= hi)
                    rows.append(values[min(max(q, lo), hi - 1)])
                out[key] = np.stack(rows)
                out[f"{key}_is_pad"] = np.array(pads, dtype=bool)
            else:
                out[key] = values[g]
        out["task"] = self.tasks[int(self.arrays["task_index"][g])]
        return out


def assert_item_equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        if key == "task":
            assert isinstance(got[key], str) and got[key] == value
            continue
        g = np.asarray(got[key])
        assert g.dtype == value.dtype, (key, g.dtype, value.dtype)
        assert g.shape == value.shape, (key, g.shape, value.shape)
        np.testing.assert_array_equal(g, value, err_msg=key)


def assert_batch_equal(batch: dict, items: list[dict]) -> None:
    assert set(batch) == set(items[0])
    for key in items[0]:
        if key == "task":
            assert batch[key] == [item["task"] for item in items]
            continue
        want = np.stack([np.asarray(item[key]) for item in items])
        got = batch[key]
        assert isinstance(got, np.ndarray), key
        assert got.dtype == want.dtype and got.shape == want.shape, (key, got.dtype, got.shape, want.shape)
        np.testing.assert_array_equal(got, want, err_msg=key)


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    base = tmp_path_factory.mktemp("windows")
    src = write_sample_dataset(base / "src", n_episodes=N_EPISODES, lengths=(3, 25), fps=FPS, seed=7,
                               extra_nd=True, image_keys=(IMAGE,), image_shape=IMAGE_SHAPE, episodes_per_file=4,
                               tasks=("pick", "place", "push"))
    store = base / "store"
    lerobot_zarr.open_dataset(src, root=store, progress=False)
    return src, store, Reference(src)


def open_ds(store, **kwargs):
    return lerobot_zarr.open_dataset(store, progress=False, **kwargs)


def store_digest(store: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(store.rglob("*")) if p.is_file() and p.name != ".lock"}


# ----------------------------------------------------------------------------------------------- strategies

frame_offsets = st.lists(st.integers(-5, 20), min_size=1, max_size=6)


@st.composite
def delta_timestamps(draw, keys=("observation.state", "action")):
    chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=len(keys)))
    return {key: [k / FPS for k in draw(frame_offsets)] for key in chosen}


@st.composite
def episode_subsets(draw):
    if draw(st.booleans()):
        return None
    return sorted(draw(st.lists(st.integers(0, N_EPISODES - 1), min_size=1, max_size=N_EPISODES, unique=True)))


def draw_index(data, ref: Reference, frames: list[int]):
    """Any valid index, biased towards the first / last frame of episodes, sometimes negative."""
    n = len(frames)
    edges = [j for j, g in enumerate(frames)
             if g == ref.bounds[ref.episode_of[g]][0] or g == ref.bounds[ref.episode_of[g]][1] - 1]
    j = data.draw(st.one_of(st.sampled_from(edges), st.integers(0, n - 1)))
    if data.draw(st.booleans()):
        j -= n
    return j


# ----------------------------------------------------------------------------------------------- properties


@SETTINGS
@given(data=st.data(), deltas=delta_timestamps(("observation.state", "action", GRID, "index")),
       episodes=episode_subsets())
def test_getitem_matches_reference(sample, data, deltas, episodes):
    _, store, ref = sample
    ds = open_ds(store, episodes=episodes, delta_timestamps=deltas)
    frames = ref.frames(episodes)
    assert len(ds) == len(frames)
    for _ in range(5):
        i = draw_index(data, ref, frames)
        assert_item_equal(ds[i], ref.item(frames, i, deltas))


@SETTINGS
@given(data=st.data(), deltas=delta_timestamps(), episodes=episode_subsets())
def test_get_batch_matches_reference_and_getitem(sample, data, deltas, episodes):
    _, store, ref = sample
    ds = open_ds(store, episodes=episodes, delta_timestamps=deltas)
    frames = ref.frames(episodes)
    indices = [draw_index(data, ref, frames) for _ in range(data.draw(st.integers(1, 12)))]
    batch = ds.get_batch(indices)
    assert_batch_equal(batch, [ref.item(frames, i, deltas) for i in indices])
    assert_batch_equal(batch, [ds[i] for i in indices])
    # numpy index arrays of other integer widths give the same batch
    assert_batch_equal(ds.get_batch(np.asarray(indices, dtype=np.int32)), [ds[i] for i in indices])


@SETTINGS
@given(data=st.data(), episodes=episode_subsets())
def test_contiguous_windows_batch_matches_reference(sample, data, episodes):
    """Windows of consecutive frames (the usual training spec) take a block-copy path in get_batch: check it on
    batches mixing windows inside episodes and windows cut by an edge, images included."""
    _, store, ref = sample
    deltas = {}
    for key in ("observation.state", "action", IMAGE):
        first = data.draw(st.integers(-6, 3))
        deltas[key] = [k / FPS for k in range(first, first + data.draw(st.integers(1, 18)))]
    ds = open_ds(store, episodes=episodes, delta_timestamps=deltas)
    frames = ref.frames(episodes)
    indices = data.draw(st.lists(st.integers(0, len(frames) - 1), min_size=1, max_size=64))
    assert_batch_equal(ds.get_batch(indices), [ref.item(frames, i, deltas) for i in indices])


def test_every_frame_with_edge_windows(sample):
    """Exhaustive: every frame of every episode with a window wider than any episode on both sides."""
    _, store, ref = sample
    deltas = {"observation.state": [k / FPS for k in range(-26, 1)], "action": [k / FPS for k in range(0, 27)]}
    ds = open_ds(store, delta_timestamps=deltas)
    frames = ref.frames()
    for i in range(len(ds)):
        assert_item_equal(ds[i], ref.item(frames, i, deltas))
    assert_batch_equal(ds.get_batch(np.arange(len(ds))), [ref.item(frames, i, deltas) for i in range(len(ds))])
    # padded positions repeat the edge frame, never zeros
    first = ds[0]
    lo, hi = ref.bounds[0]
    assert first["observation.state_is_pad"][:-1].all() and not first["observation.state_is_pad"][-1]
    np.testing.assert_array_equal(first["observation.state"], np.repeat(ref.arrays["observation.state"][lo:lo + 1], 27, 0))
    assert first["action_is_pad"][hi - lo:].all() and not first["action_is_pad"][:hi - lo].any()
    np.testing.assert_array_equal(first["action"][hi - lo:], np.repeat(ref.arrays["action"][hi - 1:hi], 27 - (hi - lo), 0))


def test_no_windows_plain_items(sample):
    _, store, ref = sample
    ds = open_ds(store)
    frames = ref.frames()
    assert len(ds) == ref.n
    for i in range(len(ds)):
        item = ds[i]
        assert not any(key.endswith("_is_pad") for key in item)
        assert_item_equal(item, ref.item(frames, i))
    # iterating the dataset (old-style sequence protocol, stops at IndexError) yields len(ds) items
    assert sum(1 for _ in ds) == len(ds)


def test_unsorted_episode_list_keeps_lerobot_order(sample):
    """LeRobot filters the parquet rows by episode: the subset's frames come in global index order."""
    _, store, ref = sample
    episodes = [9, 2, 5]
    ds = open_ds(store, episodes=episodes, delta_timestamps={"action": [-1 / FPS, 0, 2 / FPS]})
    frames = ref.frames(episodes)
    got = [int(ds[i]["index"]) for i in range(len(ds))]
    assert got == frames
    for i in range(len(ds)):
        assert_item_equal(ds[i], ref.item(frames, i, {"action": [-1 / FPS, 0, 2 / FPS]}))


def test_is_pad_keys_only_for_windowed_features(sample):
    _, store, _ = sample
    ds = open_ds(store, delta_timestamps={"action": [0, 1 / FPS], IMAGE: [0]})
    item = ds[3]
    pads = {key for key in item if key.endswith("_is_pad")}
    assert pads == {"action_is_pad", f"{IMAGE}_is_pad"}
    assert set(ds.get_batch([0, 1])) == set(item)
    assert item["action_is_pad"].dtype == np.bool_ and item["action_is_pad"].shape == (2,)


def test_episode_subset_keeps_original_indices(sample):
    _, store, ref = sample
    ds = open_ds(store, episodes=[4, 11])
    lo4, hi4 = ref.bounds[4]
    lo11, hi11 = ref.bounds[11]
    assert len(ds) == (hi4 - lo4) + (hi11 - lo11)
    assert int(ds[0]["episode_index"]) == 4 and int(ds[0]["index"]) == lo4 and int(ds[0]["frame_index"]) == 0
    assert int(ds[-1]["episode_index"]) == 11 and int(ds[-1]["index"]) == hi11 - 1


# ----------------------------------------------------------------------------------------------- copies


def test_outputs_are_writable_copies(sample):
    _, store, ref = sample
    before = store_digest(store)
    deltas = {"observation.state": [-2 / FPS, 0], "action": [0, 1 / FPS, 2 / FPS], IMAGE: [-1 / FPS, 0]}
    ds = open_ds(store, delta_timestamps=deltas)
    frames = ref.frames()
    indices = [0, 5, len(ds) - 1]
    originals = [ref.item(frames, i, deltas) for i in indices]
    for i in indices:
        item = ds[i]
        for key, value in item.items():
            if isinstance(value, np.ndarray) and value.ndim > 0:
                assert value.flags.writeable, key
                value[...] = 0 if value.dtype != np.bool_ else True
    batch = ds.get_batch(indices)
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            assert value.flags.writeable, key
            value[...] = 0 if value.dtype != np.bool_ else True
    # plain features of a dataset without windows too (these are single rows of the maps)
    plain = open_ds(store)
    for key, value in plain[7].items():
        if isinstance(value, np.ndarray) and value.ndim > 0:
            value[...] = 0
    for key, value in plain.get_batch([7, 8]).items():
        if isinstance(value, np.ndarray):
            value[...] = 0
    assert store_digest(store) == before
    for i, want in zip(indices, originals):
        assert_item_equal(ds[i], want)
    assert_item_equal(plain[7], ref.item(frames, 7))


def test_episode_arrays_read_only_and_equal(sample):
    _, store, ref = sample
    ds = open_ds(store)
    for e in (0, 6, N_EPISODES - 1):
        lo, hi = ref.bounds[e]
        arrays = ds.episode(e)
        for key in ("observation.state", "action", GRID, IMAGE, "index", "timestamp"):
            np.testing.assert_array_equal(arrays[key], ref.arrays[key][lo:hi], err_msg=key)
            with pytest.raises((ValueError, TypeError)):
                arrays[key][0] = 0


# ----------------------------------------------------------------------------------------------- validation


def test_deltas_close_to_multiples_are_accepted(sample):
    _, store, ref = sample
    deltas = {"action": [-0.0666667, 0.0333333, 0.1], "observation.state": [1 / FPS + 0.9e-4, -1 / FPS - 0.9e-4]}
    ds = open_ds(store, delta_timestamps=deltas)
    frames = ref.frames()
    exact = {"action": [-2 / FPS, 1 / FPS, 3 / FPS], "observation.state": [1 / FPS, -1 / FPS]}
    for i in (0, 1, 10, len(ds) - 1):
        assert_item_equal(ds[i], ref.item(frames, i, exact))


@pytest.mark.parametrize("bad", [0.01, 1 / FPS + 1.1e-4, -0.05])
def test_delta_not_multiple_of_frame_period_rejected(sample, bad):
    _, store, _ = sample
    with pytest.raises(DeltaTimestampsError, match="action") as info:
        open_ds(store, delta_timestamps={"observation.state": [0.0], "action": [0.0, bad]})
    assert isinstance(info.value, ValueError)


def test_unknown_delta_key_rejected(sample):
    _, store, _ = sample
    with pytest.raises(DeltaTimestampsError, match="observation.nope"):
        open_ds(store, delta_timestamps={"observation.nope": [0.0]})


# ----------------------------------------------------------------------------------------------- images


def test_image_windows_uint8_hwc(sample):
    _, store, ref = sample
    deltas = {IMAGE: [-3 / FPS, 0, 4 / FPS]}
    ds = open_ds(store, delta_timestamps=deltas)
    frames = ref.frames()
    for i in (0, 1, 2, 30, len(ds) - 2, len(ds) - 1):
        item = ds[i]
        assert item[IMAGE].dtype == np.uint8 and item[IMAGE].shape == (3, *IMAGE_SHAPE)
        assert_item_equal(item, ref.item(frames, i, deltas))
    batch = ds.get_batch([0, 30])
    assert batch[IMAGE].shape == (2, 3, *IMAGE_SHAPE) and batch[IMAGE].dtype == np.uint8


def test_image_windows_float32_chw(sample):
    _, store, ref = sample
    deltas = {IMAGE: [-3 / FPS, 0, 4 / FPS]}
    u8 = open_ds(store, delta_timestamps=deltas)
    f32 = open_ds(store, delta_timestamps=deltas, image_format="float32_chw")
    h, w, c = IMAGE_SHAPE
    frames = ref.frames()
    for i in (0, 17, len(u8) - 1):
        a, b = u8[i], f32[i]
        want = ref.item(frames, i, deltas)[IMAGE]
        assert b[IMAGE].dtype == np.float32 and b[IMAGE].shape == (3, c, h, w)
        assert 0.0 <= b[IMAGE].min() and b[IMAGE].max() <= 1.0
        np.testing.assert_allclose(b[IMAGE], np.transpose(want, (0, 3, 1, 2)).astype(np.float32) / 255,
                                   rtol=1e-6, atol=0)
        np.testing.assert_array_equal(b[f"{IMAGE}_is_pad"], a[f"{IMAGE}_is_pad"])
        for key in a:
            if key != IMAGE:
                np.testing.assert_array_equal(np.asarray(b[key]), np.asarray(a[key]), err_msg=key)
    batch = f32.get_batch([0, 17])
    assert batch[IMAGE].shape == (2, 3, c, h, w) and batch[IMAGE].dtype == np.float32
    np.testing.assert_array_equal(batch[IMAGE], np.stack([f32[0][IMAGE], f32[17][IMAGE]]))
    # without a window the image is (C, H, W)
    plain = open_ds(store, image_format="float32_chw")
    np.testing.assert_allclose(plain[5][IMAGE], np.transpose(ref.arrays[IMAGE][5], (2, 0, 1)) / np.float32(255),
                               rtol=1e-6, atol=0)
    assert plain[5][IMAGE].shape == (c, h, w)


def test_bad_image_format_rejected(sample):
    _, store, _ = sample
    with pytest.raises(ValueError):
        open_ds(store, image_format="float16")


# ----------------------------------------------------------------------------------------------- indices


def test_out_of_range_indices(sample):
    _, store, _ = sample
    ds = open_ds(store, episodes=[1, 3])
    n = len(ds)
    for bad in (n, n + 5, -n - 1, -10 * n):
        with pytest.raises(FrameIndexError):
            ds[bad]
        with pytest.raises(IndexError):
            ds[bad]
        with pytest.raises(FrameIndexError):
            ds.get_batch([0, bad])
    ds[n - 1], ds[-n]


def test_out_of_range_message_names_the_index_asked_for(sample):
    _, store, _ = sample
    ds = open_ds(store)
    n = len(ds)
    with pytest.raises(FrameIndexError, match=rf"(?<![\d-]){-n - 1}(?!\d)"):
        ds.get_batch([0, -n - 1])
    with pytest.raises(FrameIndexError, match=rf"(?<![\d-]){-n - 1}(?!\d)"):
        ds[-n - 1]


def test_non_integer_indices_rejected(sample):
    _, store, _ = sample
    ds = open_ds(store)
    with pytest.raises(TypeError):
        ds[1.0]
    with pytest.raises(TypeError):
        ds.get_batch(np.array([0.0, 1.0]))


def test_get_batch_of_no_indices(sample):
    _, store, _ = sample
    ds = open_ds(store, delta_timestamps={"action": [0, 1 / FPS]})
    for empty in ([], np.array([], dtype=np.int64)):
        batch = ds.get_batch(empty)
        assert batch["action"].shape == (0, 2, 6)
        assert batch["observation.state"].shape == (0, 6)
        assert batch["task"] == []


def test_episode_frames_ranges(sample):
    _, store, ref = sample
    ds = open_ds(store)
    for e in range(N_EPISODES):
        lo, hi = ref.bounds[e]
        assert ds.episode_frames(e) == range(lo, hi)
        assert [int(ds[i]["episode_index"]) for i in ds.episode_frames(e)] == [e] * (hi - lo)
    sub = open_ds(store, episodes=[2, 7, 12])
    start = 0
    for e in (2, 7, 12):
        length = ref.bounds[e][1] - ref.bounds[e][0]
        assert sub.episode_frames(e) == range(start, start + length)
        got = sub.get_batch(list(sub.episode_frames(e)))["index"]
        np.testing.assert_array_equal(got, np.arange(*ref.bounds[e]))
        start += length
    with pytest.raises(FrameIndexError):
        sub.episode_frames(3)
    with pytest.raises(FrameIndexError):
        ds.episode_frames(N_EPISODES)


def test_v21_source_windows(tmp_path):
    src = write_sample_dataset(tmp_path / "src", version="v2.1", n_episodes=5, lengths=(3, 12), fps=FPS, seed=3,
                               vector_type="list")
    ref = Reference(src)
    deltas = {"observation.state": [-2 / FPS, 0], "action": [k / FPS for k in range(5)]}
    ds = lerobot_zarr.open_dataset(src, root=tmp_path / "store", delta_timestamps=deltas, progress=False)
    frames = ref.frames()
    items = [ref.item(frames, i, deltas) for i in range(len(ds))]
    for i in range(len(ds)):
        assert_item_equal(ds[i], items[i])
    assert_batch_equal(ds.get_batch(np.arange(len(ds))[::-1]), items[::-1])


def test_frame_range_selection(sample):
    """{episode: slice} selects frames of an episode; windows still see (and pad at) the whole episode."""
    _, store, ref = sample
    deltas = {"action": [k / FPS for k in range(-2, 4)]}
    lo3, hi3 = ref.bounds[3]
    ds = open_ds(store, episodes={5: None, 3: slice(1, -1)}, delta_timestamps=deltas)
    frames = list(range(lo3 + 1, hi3 - 1)) + list(range(*ref.bounds[5]))
    assert len(ds) == len(frames)
    full = ref.frames()
    items = [ref.item(full, g, deltas) for g in frames]  # in a full dataset index == global frame
    for i, want in enumerate(items):
        assert_item_equal(ds[i], want)
    assert_batch_equal(ds.get_batch(np.arange(len(ds))), items)
    assert ds.episode_frames(3) == range(0, hi3 - lo3 - 2)
    assert pickle.loads(pickle.dumps(ds))[0]["index"] == ds[0]["index"]
    with pytest.raises(FrameIndexError):
        open_ds(store, episodes={3: slice(hi3 - lo3, None)})  # empty range
    with pytest.raises(ValueError):
        open_ds(store, episodes={3: slice(0, 4, 2)})


def test_task_index_stored_as_a_one_vector(tmp_path):
    """Some writers store LeRobot's scalar columns as list<int64>[1]: items keep that shape, tasks stay strings."""
    import pyarrow as pa

    src = write_sample_dataset(tmp_path / "src", n_episodes=3, tasks=("pick", "place", "push"))
    for path in (src / "data").rglob("*.parquet"):
        table = pq.read_table(path)
        column = table.column("task_index").combine_chunks()
        vector = pa.FixedSizeListArray.from_arrays(column, 1)
        table = table.set_column(table.schema.get_field_index("task_index"), "task_index", vector)
        pq.write_table(table.replace_schema_metadata(None), path)
    ref = Reference(src)
    ds = lerobot_zarr.open_dataset(src, root=tmp_path / "store", progress=False)
    tasks = [ref.tasks[int(np.asarray(t).reshape(-1)[0])] for t in ref.columns["task_index"]]
    assert ds[0]["task_index"].shape == (1,)
    assert [ds[i]["task"] for i in range(len(ds))] == tasks
    assert ds.get_batch(np.arange(len(ds)))["task"] == tasks
