"""An append's commit costs the same however many episodes the store holds (issue 32, RL ``add()``): the episode
table, the pack rows, the content hashes and the per-episode stats grow by appending into buffers with room
(:func:`~lerobot_zarr.store.tables.appended`), ``frame_live`` is flagged from the episodes the append touches, and
uint8 cameras may have their stats computed when asked. Checked against recomputations from scratch: the table and
hashes read back from the store, the per-episode and dataset stats from the frames given."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lerobot_zarr as lz
import lerobot_zarr.store.committing as committing_module
from lerobot_zarr.lerobot.format import STAT_NAMES, aggregate_stats, episode_stats, stats_json
from lerobot_zarr.sampling.dataset import LeRobotZarrDataset
from lerobot_zarr.store.state import read_state
from lerobot_zarr.store.tables import EpisodeTable, appended
from lerobot_zarr.utils.hashing import crc32c

FEATURES = {"x": {"dtype": "float32", "shape": [3], "names": None},
            "y": {"dtype": "float32", "shape": [1], "names": None}}


def frames(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((n, 3), dtype=np.float32), "y": rng.standard_normal(n, dtype=np.float32)}


def test_appended_views_never_change_and_a_stale_view_is_copied():
    base = np.arange(3, dtype=np.int64)
    a = appended(base, [3])
    b = appended(a, [4, 5])
    assert b.base is a.base and not b.flags.writeable, "appending to the newest view grows its buffer"
    stale = appended(a, [9])  # from an older view: a copy, the newer view's rows untouched
    assert stale.base is not b.base
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [0, 1, 2, 3, 4, 5] and stale.tolist() == [0, 1, 2, 3, 9]
    assert appended(b[1:], [6]).tolist() == [1, 2, 3, 4, 5, 6] and b.tolist() == [0, 1, 2, 3, 4, 5]
    wider = appended(np.array([1], dtype=np.int64), [0.5])  # as np.concatenate: the wider dtype
    assert wider.dtype == np.float64 and wider.tolist() == [1.0, 0.5]
    rows = appended(np.zeros((2, 3)), np.ones((1, 3)))
    assert rows.shape == (3, 3) and rows[2].tolist() == [1, 1, 1]


@pytest.mark.parametrize("capacity", [None, 120], ids=["unbounded", "ring"])
def test_many_appends_share_growing_buffers_and_match_a_recomputation(tmp_path, capacity):
    """300 logged appends (some extending the last episode, a ring buffer dropping the oldest): the committed table,
    pack rows and hashes are views of a handful of buffers (the old code copied every column at every commit), and
    equal what the store reads back; every episode's stats and the dataset stats after the fold equal those computed
    from the frames."""
    rng = np.random.default_rng(3)
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False, capacity_frames=capacity)
    ds.fold_log(log_commits=True)
    episodes: list[dict[str, np.ndarray]] = []
    copied = 0  # appends after which the table is not a view of the buffer it was before
    for k in range(300):
        part = frames(rng, int(rng.integers(1, 5)))
        before = ds.committed_state.table.length
        if k % 7 == 3:  # (the last row changes: a copy of the table)
            ds.extend_episode(part, task="t")
            episodes[-1] = {name: np.concatenate([episodes[-1][name], part[name]]) for name in part}
        else:
            ds.add_episode(part, task="t")
            episodes.append(part)
            copied += ds.committed_state.table.length.base is not before.base
        episodes = episodes[-len(ds.committed_state.table):]
    state = ds.committed_state
    if capacity is None:  # after each extend, and when a buffer doubles
        assert copied <= 300 // 7 + 2 + 9, f"the table was copied by {copied} of 257 appends"
    lengths = [len(e["y"]) for e in episodes]
    assert state.table.length.tolist() == lengths
    on_disk = read_state(ds.root)
    assert on_disk.generation == state.generation
    for key in ("start", "length", "task_index", "chunk", "offset", "episode_index_shift", "index_shift"):
        assert getattr(state.table, key).tolist() == getattr(on_disk.table, key).tolist(), key
    assert state.table.start.tolist() == EpisodeTable.contiguous(lengths, [0] * len(lengths), [0] * len(lengths),
                                                                 [0] * len(lengths)).start.tolist()
    assert state.packs.rows.tolist() == on_disk.packs.rows.tolist()
    for name in FEATURES:
        want = [crc32c(np.ascontiguousarray(e[name])) for e in episodes]
        assert state.episode_hashes(name).tolist() == on_disk.episode_hashes(name).tolist() == want, name

    rows = ds._tx.episode_stats_rows()  # the appends stacked onto the rows of the last fold
    for name in FEATURES:
        for e, values in enumerate(episodes):
            fresh = episode_stats(values[name], "numeric")
            for key in STAT_NAMES:
                assert np.array_equal(rows[name][key][e], fresh[key]), (name, e, key)
    ds.close()  # folds the log: the root's stats from every episode's
    stats = read_state(tmp_path / "s").stats
    for name in FEATURES:
        per_episode = [episode_stats(e[name], "numeric") for e in episodes]
        want = stats_json(aggregate_stats({key: np.stack([s[key] for s in per_episode]) for key in STAT_NAMES}))
        assert json.dumps(stats[name]) == json.dumps(want), name


def test_a_commit_failing_after_its_record_leaves_the_writer_on_the_store_and_its_stats_exact(tmp_path, monkeypatch):
    """An append whose commit raises after its record was written (its second half, the flags of rows no longer
    live, cut short): the writer takes the store's state (the append is committed), and the stats it builds on are
    re-read from the episodes' stats files: after more appends and the fold, they equal those of the frames."""
    rng = np.random.default_rng(5)
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False)
    ds.fold_log(log_commits=True)
    episodes = [frames(rng, 3) for _ in range(8)]
    for part in episodes[:4]:
        ds.add_episode(part, task="t")
    real = committing_module._finish_live

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(committing_module, "_finish_live", cut)
    with pytest.raises(KeyboardInterrupt):
        ds.add_episode(episodes[4], task="t")
    monkeypatch.setattr(committing_module, "_finish_live", real)
    assert len(read_state(ds.root).table) == len(ds.committed_state.table) == 5
    for part in episodes[5:]:
        ds.add_episode(part, task="t")
    ds.close()
    state = read_state(tmp_path / "s")
    assert state.table.length.tolist() == [3] * 8
    for name in FEATURES:  # (the stats read back from files count in floats: equal values)
        per_episode = [episode_stats(e[name], "numeric") for e in episodes]
        want = aggregate_stats({key: np.stack([s[key] for s in per_episode]) for key in STAT_NAMES})
        assert all(np.array_equal(state.stats[name][key], want[key]) for key in STAT_NAMES), name


def test_uint8_camera_stats_on_demand_equal_those_a_commit_records(tmp_path):
    """A uint8 camera named in ``stats_on_demand`` (an RL buffer's, since its commits of short episodes would cost
    more in image stats than in writes) gets, when asked, bit for bit the stats a store whose commits compute them
    records, over episodes shorter and longer than LeRobot's sample of frames."""
    features = {"x": {"dtype": "float32", "shape": [3], "names": None},
                "cam": {"dtype": "image", "shape": [6, 8, 3], "names": None}}
    rng = np.random.default_rng(1)
    at_commit = lz.create(tmp_path / "a", fps=10, features=features, durable=False)
    on_demand = lz.create(tmp_path / "b", fps=10, features=features, durable=False, stats_on_demand=["cam"])
    for n in (3, 150, 1, 230, 40):
        ep = {"x": rng.random((n, 3), dtype=np.float32), "cam": rng.integers(0, 256, (n, 6, 8, 3), dtype=np.uint8)}
        at_commit.add_episode(ep, task="t")
        on_demand.add_episode(ep, task="t")
    at_commit.close()
    on_demand.close()
    assert "cam" not in read_state(tmp_path / "b").stats
    want = LeRobotZarrDataset(tmp_path / "a").meta.stats["cam"]
    got = LeRobotZarrDataset(tmp_path / "b").meta.stats["cam"]
    assert got.keys() == want.keys()
    for key in want:
        assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), key


def test_episode_stats_files_read_back_exact_whatever_their_encoding(tmp_path, monkeypatch):
    """The per-episode stats files (a writer's cache, read when it reopens the store) hold each statistic as
    base64 of float64 bytes: read back, every episode's stats equal those of its frames bit for bit (and dtype); a file written
    as JSON numbers (before this encoding) is read as well, and a torn one is recomputed from the data."""
    import base64

    rng = np.random.default_rng(7)
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False)
    episodes = [frames(rng, n) for n in (3, 1, 5)]
    for part in episodes:
        ds.add_episode(part, task="t")
    ds.close()
    files = sorted((tmp_path / "s" / ".episode_stats").iterdir(), key=lambda p: int(p.stem.split("-")[1]))
    assert len(files) == 3
    doc = json.loads(files[1].read_text())
    assert isinstance(doc["x"]["mean"], str)
    numbers = {name: {k: np.frombuffer(base64.b64decode(v), "<f8").tolist() for k, v in per.items()}
               for name, per in doc.items()}  # (every feature here is 1-D: flat lists are its shape)
    files[1].write_text(json.dumps(numbers))
    files[2].write_text('{"x": ')  # torn
    reopened = lz.WritableDataset(tmp_path / "s", durable=False)
    computed = []
    real = type(reopened._tx).stats_of
    monkeypatch.setattr(type(reopened._tx), "stats_of", lambda tx, pack, offset, *a, **k:
                        computed.append(offset) or real(tx, pack, offset, *a, **k))
    rows = reopened._tx.episode_stats_rows()
    assert computed == [4], "only the torn file is recomputed: the others are read"
    for name in FEATURES:
        for e, values in enumerate(episodes):
            fresh = episode_stats(values[name], "numeric")
            for key in STAT_NAMES:
                got = rows[name][key][e]
                assert got.dtype == np.asarray(fresh[key]).dtype and np.array_equal(got, fresh[key]), (name, e, key)
    reopened.close()
    assert isinstance(json.loads(files[2].read_text())["x"]["mean"], str), "the torn file was written anew"
    assert isinstance(json.loads(files[1].read_text())["x"]["mean"], list)


def test_an_edit_after_a_fold_keeps_its_stats_when_the_store_is_reopened(tmp_path):
    """Logged commits keep their episodes' stats in one batch file per fold; an edit in place writes the edited
    episode's own stats file, which a later writer session must take over the batch's older row."""
    rng = np.random.default_rng(3)
    ds = lz.create(tmp_path / "s", fps=10, features=FEATURES, durable=False)
    ds.fold_log(log_commits=True)
    for _ in range(4):
        ds.add_episode(frames(rng, 5), task="t")
    ds.fold_log(log_commits=False)
    with ds.edit(1) as ep:
        ep["x"][:] = 100.0
    ds.close()
    assert read_state(tmp_path / "s").stats["x"]["max"] == [100.0] * 3
    again = lz.open_dataset(tmp_path / "s", mode="r+")
    again.add_episode(frames(rng, 5), task="t")
    again.close()
    held = LeRobotZarrDataset(tmp_path / "s")
    x = held.get_batch(np.arange(len(held)))["x"]
    assert read_state(tmp_path / "s").stats["x"]["max"] == x.max(0).tolist() == [100.0] * 3


def test_a_float_camera_of_a_logged_store_folds_with_lerobots_image_stats(tmp_path):
    """A float camera (a key naming an image, 3 channels first) gets per-channel stats as LeRobot publishes it: its
    commits cannot be put off to the fold's one numeric pass, which reduces N-D features another way."""
    features = {**FEATURES, "observation.image": {"dtype": "float32", "shape": [3, 4, 5], "names": None}}
    rng = np.random.default_rng(4)
    logged = lz.create(tmp_path / "a", fps=10, features=features, durable=False)
    plain = lz.create(tmp_path / "b", fps=10, features=features, durable=False)
    logged.fold_log(log_commits=True)
    for n in (3, 6, 2):
        ep = {**frames(rng, n), "observation.image": rng.random((n, 3, 4, 5), dtype=np.float32)}
        logged.add_episode(ep, task="t")
        plain.add_episode(ep, task="t")
    logged.fold_log()
    logged.close()
    plain.close()
    got, want = read_state(tmp_path / "a").stats, read_state(tmp_path / "b").stats
    assert np.shape(got["observation.image"]["mean"]) == (3, 1, 1)
    assert got == want


@pytest.mark.parametrize("bad", ["count", "shape", "range", "feature", "tail"])
def test_camera_stats_given_to_a_commit_are_checked(tmp_path, bad):
    """A recorder's camera stats (from each frame's histogram) are trusted by the commit only if they are what
    LeRobot's image stats of the episode would be shaped as; otherwise the append is refused, naming the feature."""
    from lerobot_zarr.lerobot.format import image_stats

    features = {**FEATURES, "cam": {"dtype": "image", "shape": [6, 8, 3], "names": None}}
    rng = np.random.default_rng(5)
    ds = lz.create(tmp_path / "s", fps=10, features=features, durable=False)
    ep = {**frames(rng, 7), "cam": rng.integers(0, 256, (7, 6, 8, 3), dtype=np.uint8)}
    good = image_stats(ep["cam"])
    ds.add_episode(ep, task="t", camera_stats={"cam": good})
    stats = {"cam": dict(good)}
    tail = 0
    if bad == "count":
        stats["cam"]["count"] = np.array([6])
    elif bad == "shape":
        stats["cam"]["mean"] = np.full((3,), 0.5)
    elif bad == "range":
        stats["cam"]["max"] = np.full((3, 1, 1), 2.0)
    elif bad == "feature":
        stats = {"x": good}
    else:
        tail = 1
    with pytest.raises(lz.ArgumentError, match="cam|'x'|tail"):
        ds.add_episode(ep, task="t", camera_stats=stats, tail=tail)
    ds.close()
    assert LeRobotZarrDataset(tmp_path / "s").meta.total_episodes == 1, "nothing of the refused append committed"
    kept = read_state(tmp_path / "s").stats["cam"]
    assert all(np.allclose(np.asarray(kept[k]), good[k]) for k in STAT_NAMES)
