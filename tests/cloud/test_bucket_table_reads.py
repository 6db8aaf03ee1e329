"""A LeRobot folder in a bucket, one episode opened: first (no store yet) in as many round trips at 2,000 episodes as
at 200 (v3.0), at 1,500 as at 150 (v2.1: a file per episode and camera, the folders of its files listed, not all);
again for another episode (the store holds every episode's start and length), LeRobot's episode table is
read as from a Hub repo (tests/hub/test_episode_table_reads.py), its footer and the row groups it needs through the
same SourceFiles reader, in as many round trips at 300 as at 1,000 episodes. Round trips are counted by dependency:
each answer is held until the client has sent every request it can without it (``settle``)."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest
import s3_fixtures
from hub_fixtures import assert_same_frames, fewest_round_trips

import lerobot_zarr
from lerobot_zarr.lerobot.source_meta import column_ranges
from lerobot_zarr.testing.hub_network import NetworkModel
from lerobot_zarr.testing.sample_data import write_sample_dataset

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

SIZES = (300, 1000)
SIZES_V21 = (120, 1200)
TABLE = "meta/episodes/chunk-000/file-000.parquet"
NEEDED = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
          "dataset_to_index"]


def test_reopen_reads_the_footer_and_the_row_groups_it_needs(env, tmp_path):
    folders = {}
    for n in SIZES:
        folders[n] = write_sample_dataset(tmp_path / f"src-{n}", n_episodes=n, lengths=(20, 40), episodes_per_file=20,
                                          episodes_row_group=10, seed=n)
        env.upload(folders[n], f"lerobot-{n}")

    def measure(n: int, attempt: int) -> tuple[int, int]:
        folder = folders[n]
        first, then = n // 2 + 3, n // 4 + 1  # (its row group far from the end: not in the footer's read)
        root = tmp_path / f"store-{n}-{attempt}"
        lerobot_zarr.open_dataset(env.url(f"lerobot-{n}"), episodes=[first], root=root, progress=False)
        env.server.reset_stats()
        env.server.network = NetworkModel(latency_s=0.02, rate=1e9, settle=True)
        try:
            ds = lerobot_zarr.open_dataset(env.url(f"lerobot-{n}"), episodes=[then], root=root, progress=False)
        finally:
            env.server.network = None
        # (the two HEADs asking what the folder is are sent together; a loaded machine may delay one thread's
        # first request past the other's answer: the chain is counted from the second)
        counted = (len(env.server.requests()), env.server.stats.round_trips(exclude=("zarr.json",)))
        pf = pq.ParquetFile(folder / TABLE)
        groups = sorted({then // 10, (then // 20 * 20) // 10})  # its row group, and where its data file begins
        uses = pf.metadata.serialized_size + 8 + sum(b - a for a, b in column_ranges(pf, NEEDED, groups))
        read = sum(r.bytes_sent for r in env.server.requests("GET", TABLE))
        assert 0 < read <= 2 * uses, (n, read, uses)
        if attempt == 0:  # the frames once (a re-measure counts round trips only; meta's lengths resolve the store)
            local = lerobot_zarr.open_dataset(folder, episodes=[then], root=tmp_path / f"local-{n}", progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return counted

    counts = fewest_round_trips(measure, SIZES, most=5)
    # the HEAD, the listing, the metadata files with the table's footer, its row groups, the data file's footer
    assert counts[SIZES[0]] == counts[SIZES[1]] and counts[SIZES[1]][1] <= 5, counts


def test_first_open_of_one_episode_in_as_many_round_trips_at_ten_times_the_episodes(env, tmp_path):
    """A first open (no store yet) of one episode of a LeRobot-written folder in the bucket: the round trips the
    client waits for one after the other are counted by dependency (each answer held until the client has sent
    every request it can without it: ``settle``), and are as many at 2,000 episodes as at 200. Wide features make
    the 2,000-episode table ~21 MB (its stats columns), as big as LeRobot's at ~5,000 episodes: a file LeRobot writes
    (at most 100 MB) is read whole with the other metadata files, never footer first (a round trip more)."""
    folders = {}
    for n in (200, 2000):
        folders[n] = write_sample_dataset(tmp_path / f"src-{n}", n_episodes=n, lengths=(2, 4), episodes_per_file=n,
                                          episodes_row_group=10, seed=n, state_dim=64, action_dim=64)
        env.upload(folders[n], f"first-{n}")
    assert (folders[2000] / "meta/episodes/chunk-000/file-000.parquet").stat().st_size > 16 << 20

    def measure(n: int, attempt: int) -> tuple[int]:
        ds = open_counted(env, f"first-{n}", n // 2 + 3, tmp_path / f"s-{n}-{attempt}")
        trips = env.server.stats.round_trips()
        if attempt == 0:  # the frames once (a re-measure counts round trips only)
            local = lerobot_zarr.open_dataset(folders[n], episodes=[n // 2 + 3], root=tmp_path / f"local-{n}",
                                              progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return (trips,)

    counts = {n: c[0] for n, c in fewest_round_trips(measure, (200, 2000), most=5).items()}
    # what the folder is (two HEADs), its listing, the metadata files with the episode table, the episode's rows
    # (one more where the episode table's footer is read before its row groups)
    assert counts[200] == counts[2000] <= 5, counts


def open_counted(env, folder: str, episode: int, root) -> object:
    """A first open of one episode of ``folder`` in the bucket, its requests counted from zero on the modelled
    network (20 ms per request, round trips counted by dependency)."""
    env.server.reset_stats()
    env.server.network = NetworkModel(latency_s=0.02, rate=1e9, settle=True)
    try:
        return lerobot_zarr.open_dataset(env.url(folder), episodes=[episode], root=root, progress=False)
    finally:
        env.server.network = None


def v21_folder(path, n: int, cam: str, mp4) -> object:
    """A v2.1 folder of ``n`` episodes of 3 frames, in chunks of 100 episodes (``chunks_size``: LeRobot's is 1,000;
    smaller keeps the test server's listings short), each with its mp4 (``mp4``: one serves them all)."""
    folder = write_sample_dataset(path, version="v2.1", n_episodes=n, lengths=(3, 3), video_keys=(cam,),
                                  image_shape=(16, 16, 3), seed=n)
    info = json.loads((folder / "meta/info.json").read_text())
    info.update(chunks_size=100, total_chunks=-(-n // 100))
    (folder / "meta/info.json").write_text(json.dumps(info))
    for e in range(n):
        old = folder / info["data_path"].format(episode_chunk=e // 1000, episode_index=e)
        new = folder / info["data_path"].format(episode_chunk=e // 100, episode_index=e)
        new.parent.mkdir(parents=True, exist_ok=True)
        old.rename(new)
        video = folder / info["video_path"].format(episode_chunk=e // 100, video_key=cam, episode_index=e)
        video.parent.mkdir(parents=True, exist_ok=True)
        os.link(mp4, video)
    return folder


def test_first_open_of_one_episode_of_a_v21_folder_lists_only_its_files_folders(env, tmp_path):
    """LeRobot v2.1 keeps a data file per episode and an mp4 per episode and camera: 2,400 objects at 1,200 episodes
    (a listing pages 1,000 at a time). A first open of one episode lists the bucket's ``meta/`` (with the HEAD asking
    what the folder is) and the folders of the episode's files (together), not every folder: as many round trips at
    1,200 episodes as at 120, and its frames equal a local open's."""
    pytest.importorskip("av", reason="writing mp4 files needs PyAV")
    cam = "observation.images.cam"
    video = write_sample_dataset(tmp_path / "one", version="v2.1", n_episodes=1, lengths=(3, 3), video_keys=(cam,),
                                 write_videos=True, image_shape=(16, 16, 3))
    mp4 = next(video.rglob("*.mp4"))
    folders = {}
    for n in SIZES_V21:
        folders[n] = v21_folder(tmp_path / f"src-{n}", n, cam, mp4)
        env.upload(folders[n], f"v21-{n}")

    def measure(n: int, attempt: int) -> tuple[int, int]:
        ds = open_counted(env, f"v21-{n}", n // 2 + 3, tmp_path / f"s-{n}-{attempt}")
        lists = [r.query for r in env.server.requests("GET") if "list-type" in r.query]
        counted = (len(lists), env.server.stats.round_trips())
        if attempt == 0:  # the frames once (a re-measure counts round trips only)
            local = lerobot_zarr.open_dataset(folders[n], episodes=[n // 2 + 3], root=tmp_path / f"local-{n}",
                                              progress=False)
            assert_same_frames(ds, local, f"{n} episodes")
        return counted

    counts = fewest_round_trips(measure, SIZES_V21, most=5)
    # meta/ listed with the HEAD, the metadata files, the data and video folders of the episode's chunk (listings:
    # 3), its data file, its mp4 (round trips: 5)
    assert counts[SIZES_V21[0]] == counts[SIZES_V21[1]] and counts[SIZES_V21[1]] == (3, 5), counts
