"""A writer that reopens a store takes its episodes' stats back from their stats files: the dataset's stats then
equal, value and type, those of a writer that never closed (LeRobot's ``count`` an integer array, not float), and a
stats file with values no stats can hold is recomputed from the data, never served."""

from __future__ import annotations

import json

import numpy as np

import lerobot_zarr as lz
from lerobot_zarr.store.state import read_state, stats_path

FEATURES = {"x": {"dtype": "float32", "shape": [3]}}


def episodes() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((n, 3)).astype(np.float32) for n in (24, 9, 31)]


def record(root, values, *, reopen_every: bool):
    ds = lz.create(root, fps=10, features=FEATURES, durable=False)
    for x in values:
        if reopen_every:
            ds.close()
            ds = lz.WritableDataset(root)
        ds.add_episode({"x": x}, task="t")
    stats = ds.meta.stats
    ds.close()
    return stats


def test_stats_after_reopening_equal_those_of_one_session_in_value_and_type(tmp_path):
    values = episodes()
    once = record(tmp_path / "once", values, reopen_every=False)
    reopened = record(tmp_path / "reopened", values, reopen_every=True)
    every = np.concatenate(values)
    for stats in (once, reopened):
        assert np.asarray(stats["x"]["count"]).dtype.kind == "i"
        assert np.asarray(stats["x"]["count"]).tolist() == [len(every)]
        np.testing.assert_array_equal(stats["x"]["min"], every.min(axis=0))
        np.testing.assert_array_equal(stats["x"]["max"], every.max(axis=0))
        np.testing.assert_allclose(stats["x"]["mean"], every.mean(axis=0, dtype=np.float64), rtol=1e-6)
    for key in once["x"]:
        assert np.asarray(once["x"][key]).dtype == np.asarray(reopened["x"][key]).dtype, key
        np.testing.assert_array_equal(once["x"][key], reopened["x"][key])


def test_a_stats_file_with_a_count_no_integer_holds_is_recomputed(tmp_path):
    values = episodes()
    root = tmp_path / "s"
    ds = lz.create(root, fps=10, features=FEATURES, durable=False)
    ds.add_episode({"x": values[0]}, task="t")
    ds.close()
    table = read_state(root).table
    path = stats_path(root, int(table.chunk[0]), int(table.offset[0]))
    doc = json.loads(path.read_bytes())
    doc["x"]["count"] = [len(values[0]) + 0.5]  # the frame count once truncated: only "a whole number" refuses it
    doc["x"]["max"] = [1e30, 1e30, 1e30]
    path.write_text(json.dumps(doc))
    ds = lz.WritableDataset(root)
    ds.add_episode({"x": values[1]}, task="t")
    both = np.concatenate(values[:2])
    assert np.asarray(ds.meta.stats["x"]["count"]).tolist() == [len(both)]
    np.testing.assert_array_equal(ds.meta.stats["x"]["max"], both.max(axis=0))
    ds.close()
