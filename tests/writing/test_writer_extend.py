"""The writer's hooks for the RL buffer (issue 24), checked through the public writer and reader API:
``extend_episode`` (an episode committed in parts equals the same episode added whole: frames, LeRobot's
numbering, stats, frame_live), ``add_episode(tail=)`` (rows after an episode that are not its frames) and
``set_capacity``."""

from __future__ import annotations

import numpy as np
import pytest

import lerobot_zarr
from lerobot_zarr import ArgumentError, SchemaMismatchError
from lerobot_zarr.store.state import chunk_path, live_path, read_state

FEATURES = {"observation.state": {"dtype": "float32", "shape": [3]},
            "observation.images.cam": {"dtype": "image", "shape": [4, 5, 3]}}


def frames(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"observation.state": rng.standard_normal((n, 3)).astype(np.float32),
            "observation.images.cam": rng.integers(0, 256, (n, 4, 5, 3), dtype=np.uint8)}


def part(values: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    return {k: v[lo:hi] for k, v in values.items()}


def everything(ds) -> dict[str, np.ndarray]:
    return ds.get_batch(np.arange(len(ds)))


@pytest.mark.parametrize("pack_bytes", [32 << 20, 600], ids=["in place", "moved to fresh rows"])
def test_an_episode_extended_in_parts_equals_it_added_whole(tmp_path, pack_bytes):
    whole, parts = (lerobot_zarr.create(tmp_path / name, fps=10, features=FEATURES, durable=False,
                                        pack_bytes=pack_bytes) for name in ("whole", "parts"))
    first, second = frames(7, 0), frames(23, 1)
    for w in (whole, parts):
        w.add_episode(first, task="a")
    whole.add_episode(second, task="b")
    places = set()
    reader = lerobot_zarr.LeRobotZarrDataset(tmp_path / "parts")
    for lo, hi in ((0, 5), (5, 6), (6, 15), (15, 23)):
        e = parts.add_episode(part(second, lo, hi), task="b") if lo == 0 else parts.extend_episode(
            part(second, lo, hi), task="b")
        assert e == 1
        table = read_state(tmp_path / "parts").table
        places.add((int(table.chunk[1]), int(table.offset[1])))
        assert len(reader) == 7 + (lo if lo else 0), "a reader keeps its commit until it refreshes"
        reader.refresh()
        assert len(reader) == 7 + hi
    assert (len(places) > 1) == (pack_bytes == 600)
    a, b = everything(whole), everything(parts)
    for key in a:
        if key != "task":
            assert np.array_equal(a[key], b[key]), key
    assert a["task"] == b["task"]
    assert whole.meta.stats == parts.meta.stats, "stats of the extended episode are a recomputation's"
    assert parts.meta.episode_length.tolist() == [7, 23]
    state = read_state(tmp_path / "parts")
    live = np.concatenate([np.fromfile(live_path(tmp_path / "parts", k), np.uint8) for k in range(len(state.packs))
                           if state.packs.rows[k]])
    assert live.sum() == 30, "frame_live flags exactly the frames"
    for w in (whole, parts):
        w.close()
    reopened = lerobot_zarr.open_dataset(tmp_path / "parts", mode="r+")  # a writer's check of the stats cache
    assert reopened.meta.stats == whole.meta.stats
    reopened.close()


def test_tail_rows_are_written_after_the_episode_but_are_not_frames(tmp_path):
    with lerobot_zarr.create(tmp_path / "s", fps=10, features=FEATURES, durable=False) as w:
        values = frames(6, 0)
        w.add_episode(values, task="t", tail=2)
        w.add_episode(frames(3, 1), task="t")
        assert w.meta.episode_length.tolist() == [4, 3] and len(w) == 7
        ep = w.episode(0)
        assert np.array_equal(ep["observation.state"], values["observation.state"][:4])
        state = read_state(tmp_path / "s")
        assert state.table.offset.tolist() == [0, 6], "the next episode starts after the tail rows"
        rows = np.fromfile(chunk_path(tmp_path / "s", "frame_index", 0, 1), dtype="<i8")
        assert rows[:6].tolist() == [0, 1, 2, 3, 4, 5], "tail rows go on with the episode's frame_index"
        assert w.meta.stats["observation.state"]["count"] == [7], "tail rows are not counted"
        with pytest.raises(SchemaMismatchError, match="at least one frame"):
            w.add_episode(frames(2, 2), task="t", tail=2)
        with pytest.raises(ArgumentError, match="tail"):
            w.add_episode(frames(2, 2), task="t", tail=-1)


def test_extending_needs_an_episode_and_respects_the_ring(tmp_path):
    with lerobot_zarr.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, capacity_frames=12) as w:
        with pytest.raises(ArgumentError, match="no episode to extend"):
            w.extend_episode(frames(2, 0), task="t")
        w.add_episode(frames(5, 0), task="t")
        w.add_episode(frames(4, 1), task="t")
        w.extend_episode(frames(4, 2), task="t")  # 5 + 8 > 12: the first episode goes, never the extended one
        assert w.meta.episode_length.tolist() == [8]
        assert w.episode(0)["episode_index"].tolist() == [0] * 8 and w.episode(0)["index"].tolist() == list(range(8))
        with pytest.raises(ArgumentError, match="does not fit a ring buffer of 12"):
            w.extend_episode(frames(5, 3), task="t")
        assert w.meta.episode_length.tolist() == [8]


def test_set_capacity_drops_the_oldest_episodes_and_makes_a_ring(tmp_path):
    with lerobot_zarr.create(tmp_path / "s", fps=10, features=FEATURES, durable=False) as w:
        for seed in range(5):
            w.add_episode(frames(4, seed), task="t")
        kept = w.episode(3)["observation.state"].copy()
        w.set_capacity(9)
        assert w.capacity_frames == 9 and w.meta.episode_length.tolist() == [4, 4]
        assert np.array_equal(w.episode(0)["observation.state"], kept)
        assert w.episode(0)["index"].tolist() == [0, 1, 2, 3], "renumbered from 0, as LeRobot needs"
        w.add_episode(frames(4, 9), task="t")
        assert w.meta.total_frames <= 9
        w.set_capacity(None)
        assert w.capacity_frames is None and read_state(tmp_path / "s").capacity_frames is None
        with pytest.raises(ArgumentError, match="capacity_frames"):
            w.set_capacity(0)
