"""A lazy first open of LeRobot's episode table (:class:`KnownEpisodes` ``lazy=True``, issue 32, Hub open): the
table's footer, then the needed columns of the row groups holding the episodes asked for (and where their data file
begins) only; the other row groups whose lengths or tasks the footer's statistics do not give are left unresolved
(their episode and frame ranges from the footer), and resolved later by an open that asks for one of their episodes
(the store's -1 lengths given back as :class:`KnownEpisodes`).

Values against the table read whole by pyarrow (an independent reference); bytes by the test Hub's counters against
what opening the episode uses of the table (its footer and the needed columns of those row groups).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hub_fixtures import (
    EPISODE_TABLE,
    assert_same_frames,
    episode_table,
    lib_requests,
    parse_range,
    sized_hub,
    table_bytes_used,
)

import lerobot_zarr
from lerobot_zarr.errors import CorruptStoreError, NotMaterializedError
from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.lerobot.source_files import LocalFiles
from lerobot_zarr.lerobot.source_meta import KnownEpisodes
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset

PER_FILE = 15
REPO = Path(__file__).resolve().parents[2]

hub, env = sized_hub("hub_lazy", (1000,), "org/lazy-{n}", per_file=PER_FILE)


def _check(t, ref: dict, episodes, told=None) -> None:
    """Known episodes equal the reference (their tasks: those of ``told``, default all), unresolved row groups hold
    the reference's frames, the located ones' files and rows equal it."""
    n = len(ref["length"])
    known = np.flatnonzero(t.length >= 0)
    assert np.array_equal(t.length[known], np.asarray(ref["length"])[known])
    assert np.array_equal(t.start[known], np.asarray(ref["dataset_from_index"])[known])
    assert all(t.tasks[e] == ref["tasks"][e] for e in (known if told is None else told))
    covered = set(known.tolist())
    for first, stop, f0, f1 in t.unresolved:
        assert (t.length[first:stop] == -1).all() and first % 10 == 0 and stop == min(first + 10, n)
        assert (f0, f1) == (ref["dataset_from_index"][first], ref["dataset_to_index"][stop - 1])
        covered |= set(range(first, stop))
    assert covered == set(range(n)) and t.total_frames == sum(ref["length"])
    for e in episodes:
        assert t.length[e] == ref["length"][e] and t.data_file[e] == ref["data_file"][e]
        assert t.file_row[e] == ref["file_row"][e]


def test_a_lazy_first_open_leaves_unread_row_groups_unresolved(tmp_path, monkeypatch):
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)  # (a small table: its footer read first all the same)
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=97, lengths=(5, 30), episodes_per_file=PER_FILE,
                                  episodes_row_group=10, seed=1)
    ref = episode_table(folder)
    whole = LeRobotSource(LocalFiles(folder))
    for episodes in ([0], [45], [96], [29, 30], [44, 59]):
        src = LeRobotSource(LocalFiles(folder), KnownEpisodes.first_open(episodes))
        t = src.episodes
        _check(t, ref, episodes)
        # the row groups holding the episodes and where their data files begin, at most two per episode
        groups = {g for e in episodes for g in (e // 10, ref["data_file"].index(ref["data_file"][e]) // 10)}
        read = set(range(10)) - {first // 10 for first, *_ in t.unresolved}
        assert groups <= read and len(read) <= 2 * len(episodes), (episodes, read)
        assert not t.complete
        got, want = dict(src.iter_episodes(episodes)), dict(whole.iter_episodes(episodes))
        assert all(np.array_equal(got[e][k], want[e][k]) for e in episodes for k in want[e])
        # an open asking for an episode of an unresolved row group resolves that row group (and only it, beside
        # the row groups it reads)
        first, stop, *_ = t.unresolved[len(t.unresolved) // 2]
        later = LeRobotSource(LocalFiles(folder), KnownEpisodes(t.start, t.length, (first + 1,), whole.info))
        _check(later.episodes, ref, [first + 1], told=range(first, stop))
        assert (later.episodes.length[first:stop] >= 0).all()
        assert len(later.episodes.unresolved) < len(t.unresolved)


def test_an_equal_length_table_is_resolved_from_its_footer(tmp_path, monkeypatch):
    """Row groups whose footer statistics give every episode's length and task are not unresolved; those giving
    the lengths but not the tasks are (a store keeps each episode's task)."""
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)
    for tasks in (("pick the cube",), ("pick the cube", "place the cube")):
        folder = write_sample_dataset(tmp_path / f"ds{len(tasks)}", n_episodes=60, lengths=(12, 12),
                                      episodes_per_file=PER_FILE, episodes_row_group=10, seed=4, tasks=tasks)
        t = LeRobotSource(LocalFiles(folder), KnownEpisodes.first_open([33])).episodes
        assert (t.unresolved == ()) == t.complete == (len(tasks) == 1)
        _check(t, episode_table(folder), [33])


def same_batch(got, want) -> None:
    """Every frame of two datasets equal, bit for bit (their ``meta``'s per-episode arrays not read: that resolves
    a store)."""
    idx = np.arange(len(want))
    a, b = got.get_batch(idx), want.get_batch(idx)
    assert sorted(a) == sorted(b) and len(got) == len(want)
    assert all(np.asarray(a[key]).tobytes() == np.asarray(b[key]).tobytes() if key != "task" else
               list(a[key]) == list(b[key]) for key in b)


def _table_bytes(hub, n: int) -> int:
    size = (hub.folders[n] / EPISODE_TABLE).stat().st_size
    return sum(b - a for a, b in (parse_range(r.range, size) for r in lib_requests(hub, "GET", f"/{EPISODE_TABLE}")))


def assert_store_table(root, ref: dict, *, resolved: bool) -> None:
    """The store's episode table against the source's read whole by pyarrow: every resolved episode's start,
    length and first task; an unresolved row group's frames (``resolved``: none left)."""
    state = read_state(root, resolve=False)
    assert (not state.unresolved) == resolved
    unknown = state.unresolved_mask()
    t = state.table
    for e in np.flatnonzero(~unknown).tolist():
        first = ref["tasks"][e][0] if ref["tasks"][e] else None
        assert (t.start[e], t.length[e]) == (ref["dataset_from_index"][e], ref["length"][e]), e
        assert (state.tasks[t.task_index[e]] if t.task_index[e] >= 0 else None) == first, e
    for a, b, f0, f1 in state.unresolved:
        assert (f0, f1) == (ref["dataset_from_index"][a], ref["dataset_to_index"][b - 1])


def test_a_first_open_reads_within_2x_of_what_it_uses(hub, env, tmp_path, monkeypatch):
    """By the test Hub's byte counters: a first open of one episode reads the table's footer and at most two row
    groups' columns, within 2x of what opening the episode uses (before: the table whole, over 3x); the store it
    makes holds the source's values for every episode it resolved, its frames a local open's. Asking for every
    episode's length (meta) resolves the others: the source's values; a reopen for an episode of an unresolved row
    group resolves that row group, reading within 2x again."""
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)  # (this table of 3 MB: LeRobot's are 8-90 MB)
    n, k = 1000, 517
    folder, root = hub.folders[n], tmp_path / "store"
    ref = episode_table(folder)
    ds = lerobot_zarr.open_dataset(f"org/lazy-{n}", episodes=[k], root=root, progress=False)
    assert _table_bytes(hub, n) <= 2 * table_bytes_used(folder, [k]), (_table_bytes(hub, n), table_bytes_used(folder, [k]))
    assert_store_table(root, ref, resolved=False)
    assert read_state(root, resolve=False).read_version == 5
    local = lerobot_zarr.open_dataset(folder, episodes=[k], root=tmp_path / "local", progress=False)
    same_batch(ds, local)
    # another episode, in a row group left unresolved: its row group resolved by the reopen
    other = 73
    assert read_state(root, resolve=False).unresolved_mask()[other]
    hub.reset_stats()
    again = lerobot_zarr.open_dataset(f"org/lazy-{n}", episodes=[other], root=root, progress=False)
    assert _table_bytes(hub, n) <= 2 * table_bytes_used(folder, [other])
    assert not read_state(root, resolve=False).unresolved_mask()[other]
    assert_store_table(root, ref, resolved=False)
    same_batch(again, lerobot_zarr.open_dataset(folder, episodes=[other], root=tmp_path / "local2", progress=False))
    # every episode's length asked for: resolved (the table read), the source's values
    lengths = ds.meta.episode_length
    assert lengths.tolist() == ref["length"] and ds.meta.episode_start.tolist() == ref["dataset_from_index"]
    assert_store_table(root, ref, resolved=True)
    assert read_state(root).generation == read_state(root, resolve=False).generation  # (nothing left to resolve)
    # the frames served before and after resolution are the same
    assert_same_frames(lerobot_zarr.open_dataset(root, episodes=[k, other]),
                       lerobot_zarr.open_dataset(folder, episodes=[k, other], root=tmp_path / "local3",
                                                 progress=False), "resolved")


_RESOLVE = r"""
import os, sys
import lerobot_zarr.store.committing as committing
from lerobot_zarr.store.state import read_state
real = committing.atomic_write
def killed(path, *args, **kwargs):
    if sys.argv[2] == "before":
        os._exit(3)
    real(path, *args, **kwargs)
    os._exit(3)
committing.atomic_write = killed
read_state(sys.argv[1])
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_while_resolving_leaves_the_store_readable(hub, env, tmp_path, monkeypatch, when):
    """A process killed while it resolves a store (before its commit's root is written, or just after) leaves the
    store at a commit: unresolved as made, or resolved; either way readable, and the next read resolves it to the
    source's values."""
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)
    n, k = 1000, 250
    folder, root = hub.folders[n], tmp_path / "store"
    lerobot_zarr.open_dataset(f"org/lazy-{n}", episodes=[k], root=root, progress=False)
    before = read_state(root, resolve=False)
    env_vars = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                    HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_HOME=str(env.hf_home))
    out = subprocess.run([sys.executable, "-c", _RESOLVE, str(root), when], env=env_vars, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 3, out.stderr[-2000:]
    after = read_state(root, resolve=False)
    assert after.unresolved == (before.unresolved if when == "before" else ())
    ref = episode_table(folder)
    assert_store_table(root, ref, resolved=when == "after")
    ds = lerobot_zarr.open_dataset(root, episodes=[k])
    assert_same_frames(ds, lerobot_zarr.open_dataset(folder, episodes=[k], root=tmp_path / "local", progress=False),
                       when)
    assert ds.meta.episode_length.tolist() == ref["length"]
    assert_store_table(root, ref, resolved=True)


def test_unresolved_row_groups_are_checked_when_read(hub, env, tmp_path, monkeypatch):
    """A format-5 root whose unresolved entries do not match its table's placeholders, or are out of order, is a
    CorruptStoreError naming the key; a read without the source to resolve it says why it cannot."""
    monkeypatch.setattr(source_meta, "_FOOTER_FIRST_MIN", 0)
    root = tmp_path / "store"
    lerobot_zarr.open_dataset("org/lazy-1000", episodes=[5], root=root, progress=False)
    doc = json.loads((root / "zarr.json").read_text())
    attrs = doc["attributes"]["lerobot_zarr"]
    good = attrs["unresolved"]
    for bad in ([[good[1][0], good[1][1], good[1][2] + 1, good[1][3]]], [good[1], good[0]], [], [[0, 1, 2]]):
        attrs["unresolved"] = bad
        (root / "zarr.json").write_text(json.dumps(doc))
        with pytest.raises(CorruptStoreError, match="unresolved"):
            read_state(root, resolve=False)
    attrs["unresolved"] = good
    (root / "zarr.json").write_text(json.dumps(doc))
    env.offline(True)
    with pytest.raises(NotMaterializedError, match="not in the store|offline|reach"):
        read_state(root)


def test_unresolved_groups_are_refused_unless_every_episode_follows_from_frame_0():
    """The row groups left unresolved stand for their episodes only if, with the episodes known, they lay the
    frames out one after another from frame 0: a gap, an overlap or a group known in part is said, not kept."""
    from lerobot_zarr.lerobot.table_footer import unresolved_groups

    first_row = np.array([0, 3, 6])
    start, length = np.array([0, 2, 4, -1, -1, -1]), np.array([2, 2, 2, -1, -1, -1])
    assert unresolved_groups(np.array([[0, 6], [6, 12]]), first_row, start, length) == ((3, 6, 6, 12),)
    gap = unresolved_groups(np.array([[0, 6], [7, 12]]), first_row, start, length)
    assert isinstance(gap, str) and "frames [7, 12)" in gap and "follow frame 6" in gap
    overlap = unresolved_groups(np.array([[0, 6], [6, 12]]), first_row, np.array([0, 3, 4, -1, -1, -1]), length)
    assert isinstance(overlap, str) and "frames [3, 5)" in overlap and "follow frame 2" in overlap
    part = unresolved_groups(np.array([[0, 6], [6, 12]]), first_row, start, np.array([2, 2, 2, 2, -1, -1]))
    assert part == "the episodes of row group 1 are known only in part"
