"""What a one-episode open of a Hub repo reads of the episode's DATA file, when the file is much bigger than the
tail read for its footer (LeRobot's ~400 episodes per file, one row group per episode): the footer's tail and the
bytes where the episode's rows are estimated to lie (from the episode table: rows spread evenly over the file) are
fetched together, so the row group costs no round trip of its own; an estimate that misses costs that round trip
again, never a value (reads take held bytes only where they hold the whole range).

Frames are compared with a local open of the same folder (pyarrow reading the files whole).
"""

from __future__ import annotations

from hub_fixtures import CLIENT_NOISE, assert_same_frames, fewest_round_trips, lib_requests, parse_range, sized_hub

import lerobot_zarr
from lerobot_zarr.lerobot import data_windows
from lerobot_zarr.lerobot import source as source_module
from lerobot_zarr.testing.hub_server import NetworkModel

SIZES = (400, 2000)
PER_FILE = 200  # data files of ~1 MB: ten times the tail read for their footer
MODEL = NetworkModel(latency_s=0.05, rate=1e9, settle=True)

hub, env = sized_hub("hub_data_reads", SIZES, "org/data-{n}", per_file=PER_FILE)


def _data_reads(hub, n: int, k: int) -> tuple[str, list[tuple[int, int]]]:
    """The data file of episode ``k`` (``PER_FILE`` episodes a file) and the byte ranges read of it."""
    rel = f"data/chunk-000/file-{k // PER_FILE:03d}.parquet"
    size = (hub.folders[n] / rel).stat().st_size
    return rel, [parse_range(r.range, size) for r in lib_requests(hub, "GET", f"/{rel}")]


def test_the_row_group_comes_with_the_data_files_footer(hub, env, tmp_path):
    """Four round trips (revision, listing, metadata files, the data file) at 400 and 2,000 episodes; two requests
    of the data file, sent together: its tail, and before it a quarter of the file at most; the frames exact."""
    def measure(n: int, attempt: int) -> tuple[int, int]:
        k = n // 2 + 57  # a middle row of a middle data file
        hub.reset_stats()
        hub.network = MODEL
        try:
            ds = lerobot_zarr.open_dataset(f"org/data-{n}", episodes=[k], root=tmp_path / f"hub-{n}-{attempt}",
                                           progress=False)
        finally:
            hub.network = None
        rel, reads = _data_reads(hub, n, k)
        size = (hub.folders[n] / rel).stat().st_size
        assert len(reads) == 2, reads  # the footer's tail, the estimated rows
        (a, b), tail = sorted(reads)
        assert tail[1] == size and b <= tail[0] and b - a <= size / 4, (reads, size)
        if attempt == 0:
            local = lerobot_zarr.open_dataset(hub.folders[n], episodes=[k], root=tmp_path / f"local-{n}",
                                              progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return len(reads), hub.stats.round_trips(exclude=CLIENT_NOISE)

    counts = fewest_round_trips(measure, SIZES, most=4)
    assert counts[SIZES[0]] == counts[SIZES[1]] and counts[SIZES[1]][1] <= 4, counts


def test_an_estimate_that_misses_costs_a_request_not_a_value(hub, env, tmp_path, monkeypatch):
    """Every estimate moved to the file's first bytes (made before the footer, from the episode table's footer, or
    after the table was read): the row group is read after the footer, the frames exact."""
    def wrong(self, episodes, hints):
        return {self.episodes.data_file[e]: [(0, 1024)] for e in episodes}

    monkeypatch.setattr(source_module.LeRobotSource, "_row_windows", wrong)
    monkeypatch.setattr(data_windows, "row_window", lambda *args: (0, 1024))
    n, k = SIZES[0], SIZES[0] // 2 + 57
    ds = lerobot_zarr.open_dataset(f"org/data-{n}", episodes=[k], root=tmp_path / "hub", progress=False)
    _, reads = _data_reads(hub, n, k)
    assert len(reads) == 3 and (0, 1024) in reads, reads  # the (useless) estimate, the footer, the row group
    local = lerobot_zarr.open_dataset(hub.folders[n], episodes=[k], root=tmp_path / "local", progress=False)
    assert_same_frames(ds, local, "a missed estimate")
