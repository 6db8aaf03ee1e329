"""A lazy store (issue 32, format 5: made by a first open of a few episodes of a LeRobot folder in a bucket, the
episode table's other row groups unresolved) published with push_store: the push resolves it first (it took the
writer lock, then read the state, which resolving refused: "read it first"), and the published store serves the
episodes' values, with every episode's length the source's."""

from __future__ import annotations

import numpy as np
import s3_fixtures
from hub_fixtures import assert_same_frames

import lerobot_zarr
from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.writing.sync import push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test


def test_pushing_a_lazy_store_resolves_it_first(env, tmp_path, monkeypatch):
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)  # (a small table: read by ranges as a big one is)
    folder = write_sample_dataset(tmp_path / "src", n_episodes=40, lengths=(20, 40), episodes_per_file=5,
                                  episodes_row_group=10, seed=4)
    env.upload(folder, "lerobot-40")
    root = tmp_path / "store"
    lerobot_zarr.open_dataset(env.url("lerobot-40"), episodes=[23], root=root, progress=False)
    assert read_state(root, resolve=False).unresolved
    push_store(root, env.url("stores/lazy"), progress=False)
    assert not read_state(root, resolve=False).unresolved
    local = lerobot_zarr.open_dataset(folder, root=tmp_path / "local", progress=False)
    pushed = lerobot_zarr.open_dataset(env.url("stores/lazy"), episodes=[23])
    assert np.array_equal(pushed.meta.episode_length, local.meta.episode_length)
    assert np.array_equal(pushed.meta.episode_start, local.meta.episode_start)
    assert_same_frames(pushed, lerobot_zarr.open_dataset(folder, episodes=[23], root=tmp_path / "l23",
                                                         progress=False), "pushed")
