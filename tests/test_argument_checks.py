"""Arguments of the wrong kind get a typed ``ArgumentError`` (also a ``TypeError``/``ValueError``) naming what is
wrong, before any work starts: episode selections of floats, strings or 2-D arrays, 2-D batches, a missing task,
feature names that samples reserve; a ``delta_timestamps`` that is not a mapping gets ``DeltaTimestampsError``."""

from __future__ import annotations

import numpy as np
import pytest

import lerobot_zarr as lz
from lerobot_zarr import ArgumentError, DeltaTimestampsError, SchemaMismatchError, UnsupportedDtypeError
from lerobot_zarr.api import materialize
from lerobot_zarr.testing.sample_data import write_sample_dataset

BAD_SELECTIONS = {
    "float": [1.0],
    "string items": ["1"],
    "a string": "01",
    "2-D array": np.zeros((2, 2), dtype=np.int64),
    "bool": [True],
    "float keys": {1.5: None},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("src") / "ds", n_episodes=4, lengths=(8, 12))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize("episodes", list(BAD_SELECTIONS.values()), ids=list(BAD_SELECTIONS))
def test_bad_episode_selections_are_refused_everywhere(folder, cache, episodes):
    with pytest.raises(ArgumentError, match="episode"):
        lz.open_dataset(folder, episodes=episodes, progress=False)
    assert not (cache / "cache").exists() or not list((cache / "cache").rglob("zarr.json")), "nothing was made"
    with pytest.raises(ArgumentError, match="episode"):
        lz.stream(folder, episodes=episodes)
    store = lz.open_dataset(folder, episodes=[0], progress=False).root
    with pytest.raises(ArgumentError, match="episode"):
        materialize(store, episodes, progress=False)
    with pytest.raises(ArgumentError, match="episode"):
        lz.LeRobotZarrDataset(store, episodes=episodes)


def test_good_selections_of_other_integer_types_still_work(folder, cache):
    for episodes in ([np.int64(1), 3], np.array([1, 3], dtype=np.int32), range(1, 4, 2), {1: None, 3: (0, 2)}):
        ds = lz.open_dataset(folder, episodes=episodes, progress=False)
        assert sorted(ds.episodes) == [1, 3]


@pytest.mark.parametrize("deltas", [[0.0, 0.1], "action", 0.1])
def test_delta_timestamps_must_be_a_mapping(folder, cache, deltas):
    with pytest.raises(DeltaTimestampsError, match="must be a mapping"):
        lz.open_dataset(folder, delta_timestamps=deltas, progress=False)


def test_get_batch_refuses_2d_indices(folder, cache):
    ds = lz.open_dataset(folder, progress=False)
    with pytest.raises(ArgumentError, match="1-D"):
        ds.get_batch(np.zeros((2, 3), dtype=np.int64))
    assert ds.get_batch(np.array([0, 1]))["index"].tolist() == [0, 1]


@pytest.fixture
def writable(tmp_path):
    ds = lz.create(tmp_path / "rec", fps=10, features={"x": {"dtype": "float32", "shape": [2]}}, durable=False,
                   min_free_bytes=0)
    ds.add_episode({"x": np.zeros((3, 2), np.float32)}, task="t")
    ds.add_episode({"x": np.ones((3, 2), np.float32)}, task="t")
    yield ds
    ds.close()


@pytest.mark.parametrize("episodes", ["0", [1.0], np.zeros((1, 1), dtype=np.int64), [True], None])
def test_delete_episodes_refuses_non_integers(writable, episodes):
    before = (writable.root / "zarr.json").read_bytes()
    with pytest.raises(ArgumentError, match="episode"):
        writable.delete_episodes(episodes)
    assert (writable.root / "zarr.json").read_bytes() == before and writable.meta.total_episodes == 2


@pytest.mark.parametrize("task", [None, "", 3, b"t"])
def test_add_episode_needs_a_task_string(writable, task):
    with pytest.raises(ArgumentError, match="task"):
        writable.add_episode({"x": np.zeros((3, 2), np.float32)}, task=task)
    with pytest.raises(ArgumentError, match="task"):
        writable.add_frame({"x": np.zeros(2, np.float32)}, task=task)
    assert writable.meta.total_episodes == 2


@pytest.mark.parametrize("name,spec", [
    ("task", {"dtype": "float32", "shape": [1]}),
    ("action_is_pad", {"dtype": "bool", "shape": [1]}),
    ("episode_index", {"dtype": "float32", "shape": [1]}),
    ("timestamp", {"dtype": "float64", "shape": [1]}),
    ("task_index", {"dtype": "int64", "shape": [2]}),
])
def test_create_refuses_names_samples_reserve(tmp_path, name, spec):
    with pytest.raises(SchemaMismatchError, match=name) as info:
        lz.create(tmp_path / "s", fps=10, features={"x": {"dtype": "float32", "shape": [2]}, name: spec})
    assert info.value.feature == name
    assert not (tmp_path / "s" / "zarr.json").exists()


def test_create_accepts_lerobot_columns_with_lerobots_own_spec(tmp_path):
    ds = lz.create(tmp_path / "s", fps=10, features={"x": {"dtype": "float32", "shape": [2]},
                                                   "episode_index": {"dtype": "int64", "shape": [1]},
                                                   "timestamp": {"dtype": "float32", "shape": [1]}})
    ds.add_episode({"x": np.zeros((2, 2), np.float32)}, task="t")
    assert ds[1]["timestamp"] == np.float32(0.1) and ds[1]["episode_index"] == 0
    ds.close()


def test_a_frame_index_of_another_type_is_an_argument_error(folder, cache):
    ds = lz.open_dataset(folder, progress=False)
    for i in (1.0, "1", None, [1]):
        with pytest.raises(ArgumentError, match="frame indices are integers"):
            ds[i]
    assert ds[np.int32(1)]["index"] == 1


@pytest.mark.parametrize("method", ["add_episode", "edit", "delete_episodes", "delete_frames", "set_task",
                                    "drop_features"])
def test_writing_a_read_only_dataset_says_how_to_open_it_for_writing(folder, cache, method):
    ds = lz.open_dataset(folder, progress=False)
    with pytest.raises(AttributeError, match=r"read-only: open it with open_dataset\(\.\.\., mode='r\+'\)"):
        getattr(ds, method)
    assert not hasattr(ds, "no_such_thing")


@pytest.mark.parametrize("dtype", ["float128", "longdouble", "clongdouble", "complex64"])
def test_create_refuses_dtypes_without_portable_raw_bytes(tmp_path, dtype):
    try:
        np.dtype(dtype)
    except TypeError:
        pytest.skip(f"numpy has no {dtype} here")
    with pytest.raises(UnsupportedDtypeError, match="'a'") as info:
        lz.create(tmp_path / "s", fps=30, features={"a": {"dtype": dtype, "shape": [2]}})
    assert info.value.feature == "a"
    assert not (tmp_path / "s" / "zarr.json").exists()


def test_create_keeps_float16(tmp_path):
    with lz.create(tmp_path / "s", fps=30, features={"a": {"dtype": "float16", "shape": [2]}}, min_free_bytes=0) as ds:
        ds.add_episode({"a": np.full((3, 2), 1.5, np.float16)}, task="t")
        assert ds[2]["a"].tolist() == [1.5, 1.5]



@pytest.mark.parametrize("name", ["capacity_frames", "pack_bytes", "min_free_bytes"])
@pytest.mark.parametrize("value", [2.5, "10", True, -1, 0])
def test_create_refuses_bad_sizes(tmp_path, name, value):
    if name == "min_free_bytes" and value == 0:
        value = -2  # 0 is a valid margin
    with pytest.raises(ArgumentError, match=name):
        lz.create(tmp_path / "s", fps=30, features={"a": {"dtype": "float32", "shape": [2]}}, **{name: value})
    assert not (tmp_path / "s" / "zarr.json").exists()


def test_min_free_bytes_env_must_be_a_non_negative_integer(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ZARR_MIN_FREE_BYTES", "-5")
    with pytest.raises(ArgumentError, match="LEROBOT_ZARR_MIN_FREE_BYTES must be an integer >= 0"):
        lz.create(tmp_path / "s", fps=30, features={"a": {"dtype": "float32", "shape": [2]}})


@pytest.mark.parametrize("spec", [
    {"dtype": "float32", "shape": [3], "names": ["x", "y"]},
    {"dtype": "float32", "shape": [3], "names": ["x", "y", "z", "w"]},
    {"dtype": "float64", "shape": [2, 3], "names": ["a", "b", "c", "d"]},
    {"dtype": "image", "shape": [6, 8, 3], "names": ["height", "width"]},
])
def test_create_refuses_names_that_do_not_match_the_shape(tmp_path, spec):
    with pytest.raises(SchemaMismatchError, match="'a'.*names") as info:
        lz.create(tmp_path / "s", fps=30, features={"a": spec})
    assert info.value.feature == "a"
    assert not (tmp_path / "s" / "zarr.json").exists()


@pytest.mark.parametrize("spec", [
    {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
    {"dtype": "float32", "shape": [3], "names": {"motors": ["x", "y"]}},
    {"dtype": "float32", "shape": [3], "names": None},
    {"dtype": "float64", "shape": [2, 3], "names": ["rows", "columns"]},
    {"dtype": "image", "shape": [6, 8, 3], "names": ["height", "width", "channels"]},
])
def test_create_accepts_names_that_match_the_shape(tmp_path, spec):
    """The names come back as given: from the writer, from the store reopened, and from ``inspect``."""
    with lz.create(tmp_path / "s", fps=30, features={"a": spec}, min_free_bytes=0) as w:
        assert w.meta.features["a"]["names"] == spec["names"]
        dtype = np.uint8 if spec["dtype"] == "image" else spec["dtype"]
        w.add_episode({"a": np.zeros((2, *spec["shape"]), dtype)}, task="t")
    assert lz.open_dataset(tmp_path / "s").meta.features["a"]["names"] == spec["names"]
    assert lz.inspect(tmp_path / "s").features["a"]["names"] == spec["names"]
