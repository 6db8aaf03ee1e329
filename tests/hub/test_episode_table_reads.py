"""What an open reads of LeRobot's episode table when the store made from the repo already holds every episode's
start and length (a second open for other episodes, a lazy fetch, ``fetch_missing``, ``verify --repair``): the
table's footer, in one request sized from info.json, and the columns an open needs of the row groups holding the
episodes asked for (and where their data file begins), not the whole table (LeRobot's per-episode stats columns are
most of it).

Repos laid out as LeRobot 0.6.1 writes them (row groups of 10 episodes with per-episode stats columns), at two
sizes and with data-file boundaries inside row groups. Values are compared with the table read whole by pyarrow
(an independent reference: paths and rows computed here) and the frames with a local open.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import (
    CLIENT_NOISE,
    EPISODE_TABLE,
    assert_same_frames,
    episode_table,
    fewest_round_trips,
    lib_requests,
    parse_range,
    sized_hub,
    table_bytes_used,
)

import lerobot_zarr
from lerobot_zarr.errors import ArgumentError, CorruptSourceError, SchemaMismatchError
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.lerobot.source_files import LocalFiles
from lerobot_zarr.lerobot.source_meta import KnownEpisodes
from lerobot_zarr.lerobot.table_footer import file_of_row, file_pair_bounds
from lerobot_zarr.testing.hub_server import NetworkModel
from lerobot_zarr.testing.sample_data import write_sample_dataset

SIZES = (300, 1000)  # both with a table of more than its footer's estimate (a small one comes whole)
PER_FILE = 15  # data files begin inside row groups of the episode table (10 episodes each)
MODEL = NetworkModel(latency_s=0.05, rate=1e9, settle=True)
CAM = "observation.images.cam"


hub, env = sized_hub("hub_table", SIZES, "org/table-{n}", per_file=PER_FILE)


def known(ref: dict, episodes, info) -> KnownEpisodes:
    return KnownEpisodes(np.asarray(ref["dataset_from_index"]), np.asarray(ref["length"]), tuple(episodes), info)


@pytest.mark.parametrize("table_files", [1, 2])
def test_located_episodes_equal_the_table_read_whole(tmp_path, table_files):
    # first, middle and last episodes; the first of a data file, one inside a row group where a file begins, and
    # one whose file began row groups earlier; the v3.0 layout with its data file boundaries inside row groups, the
    # episode table in one file or two (LeRobot starts another past a size)
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=97, lengths=(5, 30), episodes_per_file=PER_FILE,
                                  episodes_row_group=10, seed=1, video_keys=(CAM,))
    ref = episode_table(folder)
    if table_files == 2:
        table = pq.read_table(folder / EPISODE_TABLE)
        pq.write_table(table.slice(0, 50), folder / EPISODE_TABLE, row_group_size=10)
        pq.write_table(table.slice(50), folder / EPISODE_TABLE.replace("file-000", "file-001"), row_group_size=10)
    whole = LeRobotSource(LocalFiles(folder))
    for episodes in ([0], [48], [96], [45], [46], [44, 59, 60], [29, 30, 31]):
        src = LeRobotSource(LocalFiles(folder), known(ref, episodes, whole.info))
        t = src.episodes
        assert t.located == frozenset(episodes)
        assert np.array_equal(t.length, ref["length"]) and np.array_equal(t.start, ref["dataset_from_index"])
        for e in episodes:
            assert t.data_file[e] == ref["data_file"][e] == whole.episodes.data_file[e]
            assert t.file_row[e] == ref["file_row"][e] == whole.episodes.file_row[e], e
            assert t.tasks[e] == ref["tasks"][e]
            c, f = ref[f"videos/{CAM}/chunk_index"][e], ref[f"videos/{CAM}/file_index"][e]
            assert t.videos[CAM][e] == (f"videos/{CAM}/chunk-{c:03d}/file-{f:03d}.mp4",
                                        ref[f"videos/{CAM}/from_timestamp"][e]) == whole.episodes.videos[CAM][e]
        assert [e for e, ref_ in enumerate(t.videos[CAM]) if ref_ is not None] == sorted(episodes)
        _check_file_rows(t, ref)
        got = dict(src.iter_episodes(episodes))
        want = dict(whole.iter_episodes(episodes))
        assert got.keys() == want.keys()
        for e in episodes:
            assert all(np.array_equal(got[e][k], want[e][k]) for k in want[e])
        other = next(e for e in range(97) if e not in episodes)
        with pytest.raises(ArgumentError, match="not located"):
            list(src.iter_episodes([other]))


def _check_file_rows(t, ref: dict) -> None:
    """The bounds of the located episodes' data files' rows (from the table's footer) hold the rows the reference
    gives them (the lengths of the file's episodes summed), and are exact where the file ends with a row group."""
    rows: dict[str, int] = {}
    for rel, n in zip(ref["data_file"], ref["length"], strict=True):
        rows[rel] = rows.get(rel, 0) + n
    assert set(t.file_rows) == {t.data_file[e] for e in t.located}
    for rel, (low, high) in t.file_rows.items():
        last = max(e for e, r in enumerate(ref["data_file"]) if r == rel)
        assert low <= rows[rel] <= high, (rel, low, high, rows[rel])
        if last % 10 == 9 or last == len(ref["length"]) - 1:
            assert low == high, rel
        else:  # the file ends inside a row group: the bounds within that row group's frames
            group = slice(last - last % 10, last - last % 10 + 10)
            assert high - low <= sum(ref["length"][group]), rel


@pytest.mark.parametrize("per_file", [10, 15, 20, 7])
def test_data_file_rows_are_bounded_from_the_footer(tmp_path, per_file):
    """Every episode located alone: its data file's rows bounded by the episode table's footer, against the table
    read whole (data files ending at, inside and across row groups of the episode table)."""
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=64, lengths=(5, 30), episodes_per_file=per_file,
                                  episodes_row_group=10, seed=3)
    ref = episode_table(folder)
    info = LeRobotSource(LocalFiles(folder)).info
    for e in range(64):
        t = LeRobotSource(LocalFiles(folder), known(ref, [e], info)).episodes
        assert t.located == frozenset([e]) and list(t.file_rows) == [ref["data_file"][e]]
        _check_file_rows(t, ref)


@pytest.mark.parametrize("per_file", [10, 15, 20, 7])
def test_the_footer_bounds_the_data_file_of_each_row(tmp_path, per_file):
    """From the footer's statistics alone, each row's data file and the first and last rows of that file (where its
    row group lies within one data file), against the table read whole."""
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=64, lengths=(5, 30), episodes_per_file=per_file,
                                  episodes_row_group=10, seed=3)
    ref = episode_table(folder)
    md = pq.ParquetFile(folder / EPISODE_TABLE).metadata
    pf = pq.ParquetFile(folder / EPISODE_TABLE)
    first_row = np.arange(0, 71, 10).clip(max=64)
    told = 0
    for e in range(64):
        found = file_of_row(lambda i: file_pair_bounds(pf, [i])[0], first_row, e)
        rows = [r for r in range(64) if ref["data_file"][r] == ref["data_file"][e]]
        group = range(e - e % 10, min(64, e - e % 10 + 10))
        if len({ref["data_file"][r] for r in group}) > 1:  # its row group spans files: not told
            assert found is None, e
            continue
        told += 1
        pair, (first_low, first_high), (last_low, last_high) = found
        assert f"data/chunk-{pair[0]:03d}/file-{pair[1]:03d}.parquet" == ref["data_file"][e]
        assert first_low <= rows[0] <= first_high and last_low <= rows[-1] <= last_high, (e, found, rows)
        assert first_high - first_low < 10 and last_high - last_low < 10
    assert md.num_row_groups == 7 and (told >= 32 or per_file < 10), told  # (files of 7: every row group spans two)


def test_a_table_it_cannot_locate_in_is_read_whole(tmp_path):
    folder = write_sample_dataset(tmp_path / "ds", n_episodes=60, lengths=(5, 30), episodes_per_file=PER_FILE,
                                  episodes_row_group=10, seed=2)
    ref = episode_table(folder)
    info = LeRobotSource(LocalFiles(folder)).info
    table = pq.read_table(folder / EPISODE_TABLE)
    # no statistics in the footer; then rows out of episode order: the whole table, the same values
    for write in (lambda: pq.write_table(table, folder / EPISODE_TABLE, row_group_size=10, write_statistics=False),
                  lambda: pq.write_table(table.take(list(range(59, -1, -1))), folder / EPISODE_TABLE, row_group_size=10)):
        write()
        src = LeRobotSource(LocalFiles(folder), known(ref, [33], info))
        assert src.episodes.located is None
        assert src.episodes.data_file == ref["data_file"] and src.episodes.file_row.tolist() == ref["file_row"]
    # a store whose table disagrees with the source it names: refused, naming the episode
    pq.write_table(table, folder / EPISODE_TABLE, row_group_size=10)
    lengths = np.asarray(ref["length"]).copy()
    lengths[34] += 1
    wrong = KnownEpisodes(np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths, (33,), info)
    with pytest.raises(SchemaMismatchError, match="episode 34"):
        LeRobotSource(LocalFiles(folder), wrong)


def _table_reads(hub, n: int) -> list[tuple[int, int]]:
    size = (hub.folders[n] / EPISODE_TABLE).stat().st_size
    return [parse_range(r.range, size) for r in lib_requests(hub, "GET", f"/{EPISODE_TABLE}")]


def test_reopen_reads_the_footer_and_the_row_groups_it_needs(hub, env, tmp_path):
    """A second open for another episode: the episode table's footer (one request) and its needed columns of at
    most two row groups (one more round trip, with the data files' footers), as many requests and round trips at
    40 as at 1,000 episodes; bytes within 2x of what it uses (the footer, and the needed columns' chunks of the row
    groups holding the episode and where its data file begins). Frames exact against a local open."""
    def measure(n: int, attempt: int) -> tuple[int, int]:
        first, then = n // 2 + 3, n - 2  # a middle episode, then one near the end in another data file
        root = tmp_path / f"hub-{n}-{attempt}"
        lerobot_zarr.open_dataset(f"org/table-{n}", episodes=[first], root=root, progress=False)
        hub.reset_stats()
        hub.network = MODEL
        try:
            ds = lerobot_zarr.open_dataset(f"org/table-{n}", episodes=[first, then], root=root, progress=False)
        finally:
            hub.network = None
        counted = (len(lib_requests(hub)), hub.stats.round_trips(exclude=CLIENT_NOISE))
        uses = table_bytes_used(hub.folders[n], [first, then])
        read = _table_reads(hub, n)
        assert sum(b - a for a, b in read) <= 2 * uses and len(read) <= 3, (n, read, uses)
        if attempt == 0:  # the frames once (a re-measure counts round trips only)
            local = lerobot_zarr.open_dataset(hub.folders[n], episodes=[first, then], root=tmp_path / f"local-{n}",
                                              progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return counted

    counts = fewest_round_trips(measure, SIZES, most=4)
    # revision, listing, the metadata files with the table's footer, then its row groups together with the data
    # files' footers and the bytes where the episodes' rows are estimated to lie (the table's footer tells the files
    # and bounds their rows; before: the footers a round trip after the row groups)
    assert counts[SIZES[0]][1] == counts[SIZES[1]][1] <= 4, counts
    assert counts[SIZES[0]][0] <= counts[SIZES[1]][0] <= counts[SIZES[0]][0] + 1, counts


def test_fetch_missing_locates_what_it_fetches(hub, env, tmp_path):
    from lerobot_zarr.writing.transcode import fetch_missing

    n = SIZES[1]
    root = tmp_path / "store"
    lerobot_zarr.open_dataset(f"org/table-{n}", episodes=[0], root=root, progress=False)
    hub.reset_stats()
    want = [7, 512, 998]
    fetch_missing(root, want, progress=False)
    assert 0 < sum(b - a for a, b in _table_reads(hub, n)) <= 2 * table_bytes_used(hub.folders[n], want)
    local = lerobot_zarr.open_dataset(hub.folders[n], episodes=want, root=tmp_path / "local", progress=False)
    assert_same_frames(lerobot_zarr.open_dataset(root, episodes=want), local, "fetched")


@pytest.mark.parametrize("damage", ["length", "bytes"])
def test_a_malformed_footer_is_a_typed_error_naming_the_file(hub, env, tmp_path, damage):
    from lerobot_zarr.sources.resolve import resolve_source

    n = SIZES[1]
    folder = tmp_path / "bad"
    shutil.copytree(hub.folders[n], folder)
    data = bytearray((folder / EPISODE_TABLE).read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    if damage == "length":  # a footer longer than the file
        data[-8:-4] = (len(data) * 2).to_bytes(4, "little")
    else:  # a footer of the right length that is not parquet's
        data[-8 - length:-8] = bytes(length)
    (folder / EPISODE_TABLE).write_bytes(bytes(data))
    hub.add_repo(f"org/bad-footer-{damage}", folder, tags=["v3.0"])
    files = resolve_source(f"org/bad-footer-{damage}").files()
    ref = episode_table(hub.folders[n])
    info = LeRobotSource(LocalFiles(hub.folders[n])).info
    with pytest.raises(CorruptSourceError, match=rf"org/bad-footer-{damage}.*file-000\.parquet: .*footer"):
        LeRobotSource(files, known(ref, [3], info))


def test_a_v21_dataset_is_read_as_before(tmp_path):
    # its episode table is episodes.jsonl (no footer to read first): read whole, the same values as without a store
    folder = write_sample_dataset(tmp_path / "ds", version="v2.1", n_episodes=12, lengths=(5, 30), seed=4)
    whole = LeRobotSource(LocalFiles(folder))
    t = whole.episodes
    src = LeRobotSource(LocalFiles(folder), KnownEpisodes(t.start, t.length, (5,), whole.info))
    assert src.episodes.located is None
    assert src.episodes.data_file == t.data_file and np.array_equal(src.episodes.file_row, t.file_row)
    assert src.episodes.tasks == t.tasks and np.array_equal(src.episodes.length, t.length)
