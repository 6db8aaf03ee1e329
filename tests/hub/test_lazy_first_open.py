"""A lazy first open of LeRobot's episode table (:class:`KnownEpisodes` ``lazy=True``, issue 32, Hub open): the
table's footer, then the needed columns of the row groups holding the episodes asked for (and where their data file
begins) only; the other row groups whose lengths or tasks the footer's statistics do not give are left unresolved
(their episode and frame ranges from the footer), and resolved later by an open that asks for one of their episodes
(the store's -1 lengths given back as :class:`KnownEpisodes`).

Values against the table read whole by pyarrow (an independent reference); bytes by the test Hub's counters against
what opening the episode uses of the table (its footer and the needed columns of those row groups).
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import lib_requests, parse_range, sized_hub

from lerobot_zarr.lerobot import source_meta
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.lerobot.source_files import LocalFiles
from lerobot_zarr.lerobot.source_meta import KnownEpisodes, column_ranges
from lerobot_zarr.sources.resolve import resolve_source
from lerobot_zarr.testing.sample_data import write_sample_dataset

TABLE = "meta/episodes/chunk-000/file-000.parquet"
NEEDED = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
          "dataset_to_index"]
PER_FILE = 15

hub, env = sized_hub("hub_lazy", (1000,), "org/lazy-{n}", per_file=PER_FILE)


def reference(folder) -> dict:
    """The episode table read whole with pyarrow, in episode order, with each episode's data file and first row in
    it (files hold their episodes in index order)."""
    table = pq.read_table(folder / TABLE).to_pydict()
    order = np.argsort(table["episode_index"])
    out = {c: [table[c][i] for i in order] for c in table}
    first: dict[tuple[int, int], int] = {}
    out["data_file"], out["file_row"] = [], []
    for c, f, start in zip(out["data/chunk_index"], out["data/file_index"], out["dataset_from_index"], strict=True):
        out["data_file"].append(f"data/chunk-{c:03d}/file-{f:03d}.parquet")
        out["file_row"].append(start - first.setdefault((c, f), start))
    return out


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
    monkeypatch.setattr(source_meta, "_LAZY_FOOTER_MIN", 0)  # (a small table: its footer read first all the same)
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=97, lengths=(5, 30), episodes_per_file=PER_FILE,
                                  episodes_row_group=10, seed=1)
    ref = reference(folder)
    whole = LeRobotSource(LocalFiles(folder))
    for episodes in ([0], [45], [96], [29, 30], [44, 59]):
        src = LeRobotSource(LocalFiles(folder), KnownEpisodes.first_open(episodes, lazy=True))
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
    monkeypatch.setattr(source_meta, "_LAZY_FOOTER_MIN", 0)
    for tasks in (("pick the cube",), ("pick the cube", "place the cube")):
        folder = write_sample_dataset(tmp_path / f"ds{len(tasks)}", n_episodes=60, lengths=(12, 12),
                                      episodes_per_file=PER_FILE, episodes_row_group=10, seed=4, tasks=tasks)
        t = LeRobotSource(LocalFiles(folder), KnownEpisodes.first_open([33], lazy=True)).episodes
        assert (t.unresolved == ()) == t.complete == (len(tasks) == 1)
        _check(t, reference(folder), [33])


def _uses(folder, episodes) -> int:
    """What opening ``episodes`` uses of the episode table: its footer, and the needed columns' chunks of the row
    groups holding them and where their data files begin."""
    pf = pq.ParquetFile(folder / TABLE)
    ref = reference(folder)
    groups = sorted({g for e in episodes for g in (e // 10, ref["data_file"].index(ref["data_file"][e]) // 10)})
    return pf.metadata.serialized_size + 8 + sum(b - a for a, b in column_ranges(pf, NEEDED, groups))


@pytest.mark.parametrize("lazy", [False, True])
def test_a_lazy_first_open_reads_within_2x_of_what_it_uses(hub, env, monkeypatch, lazy):
    """By the test Hub's byte counters: the lazy first open reads the table's tail and at most two row groups'
    columns, within 2x of what opening the episode uses; the eager first open (the store it makes needs every
    episode's length) reads the table whole, over 2x."""
    monkeypatch.setattr(source_meta, "_LAZY_FOOTER_MIN", 0)
    n, k = 1000, 517
    folder = hub.folders[n]
    files = resolve_source(f"org/lazy-{n}").files()
    hub.reset_stats()
    src = LeRobotSource(files, KnownEpisodes.first_open([k], lazy=lazy))
    size = (folder / TABLE).stat().st_size
    read = sum(b - a for a, b in (parse_range(r.range, size) for r in lib_requests(hub, "GET", f"/{TABLE}")))
    uses = _uses(folder, [k])
    if lazy:
        assert read <= 2 * uses, (read, uses)
        _check(src.episodes, reference(folder), [k])
    else:
        assert read > 2 * uses, (read, uses)
