"""The doctor on the three shared real datasets: exactly the defects they have, checked here against the source
files themselves (pyarrow and numpy on the parquet, the mp4 files on disk), and nothing else (0 false positives).

- record-test: its videos were not kept (metadata lists them): 2 cameras x 4 episodes ``video_missing``.
- open_50: its one kept video is not where ``video_path`` says: 50 ``video_missing``; stats.json's std of joints
  3, 5 and 7 of the left arm is far from the data's (0.073 where the data has 0.0091); 12 of the 34 channels
  (both hands but two joints) never change in any frame.
- G1-policy-train: 96 episodes without their mp4; the 4 kept videos match their rows (decoded by the session's
  store, whose transcode ran the doctor).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hub_fixtures import real_dataset

from lerobot_zarr.doctor.findings import read_report
from lerobot_zarr.doctor.scan import doctor_source

pytestmark = pytest.mark.filterwarnings("ignore::lerobot_zarr.errors.LeRobotZarrWarning")


def _columns(folder, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A feature's values and episode_index of every row of a dataset, read with pyarrow alone."""
    tables = [pq.read_table(p, columns=[name, "episode_index"]) for p in sorted(folder.glob("data/*/*.parquet"))]
    table = pa.concat_tables(tables, promote_options="permissive")
    return (np.array(table.column(name).to_pylist(), dtype=np.float64),
            table.column("episode_index").to_numpy().astype(np.int64))


def _video_files(folder) -> dict[str, list[tuple[int, bool]]]:
    """Per camera, each episode and whether the mp4 its metadata names exists (v3: meta/episodes' chunk and file
    columns filled into info.json's video_path; v2.1: one file per episode)."""
    info = json.loads((folder / "meta/info.json").read_text())
    cameras = [k for k, v in info["features"].items() if v["dtype"] == "video"]
    out = {}
    if info["codebase_version"].startswith("v2"):
        for cam in cameras:
            out[cam] = [(e, (folder / info["video_path"].format(episode_chunk=0, video_key=cam,
                                                                 episode_index=e)).is_file())
                        for e in range(info["total_episodes"])]
        return out
    episodes = pq.read_table(sorted(folder.glob("meta/episodes/*/*.parquet"))[0]).to_pylist()
    for cam in cameras:
        out[cam] = [(r["episode_index"], (folder / info["video_path"].format(
            video_key=cam, chunk_index=r[f"videos/{cam}/chunk_index"],
            file_index=r[f"videos/{cam}/file_index"])).is_file()) for r in episodes]
    return out


def _kinds(report) -> set[str]:
    return {d.kind for d in report.defects}


def _missing_videos_match(report, folder) -> None:
    want = {(e, cam) for cam, eps in _video_files(folder).items() for e, there in eps if not there}
    got = {(d.episode, d.feature) for d in report.defects if d.kind == "video_missing"}
    assert got == want


def test_record_test_lacks_its_videos_and_nothing_else():
    folder = real_dataset("record-test")
    report = doctor_source(folder, progress=False)
    assert _kinds(report) == {"video_missing"} and len(report.defects) == 8
    _missing_videos_match(report, folder)
    assert report.checked_episodes == 4 and not report.notes


def test_open_50_its_std_and_dead_hands_checked_against_the_parquet():
    folder = real_dataset("open_50")
    report = doctor_source(folder, progress=False)
    assert _kinds(report) == {"video_missing", "stats_mismatch", "dead_channel"}
    _missing_videos_match(report, folder)
    stats = json.loads((folder / "meta/stats.json").read_text())
    for feature in ("actions", "state"):
        values, episode = _columns(folder, feature)
        dead = [c for c in range(values.shape[1]) if np.unique(values[:, c]).size == 1]
        assert len(dead) == 12
        [found] = [d for d in report.defects if d.kind == "dead_channel" and d.feature == feature]
        assert list(found.channels) == dead
        std = values.std(axis=0)
        room = 0.01 * std + 1e-5 * np.abs(values).max(axis=0)
        off = np.flatnonzero(np.abs(np.asarray(stats[feature]["std"]) - std) > room)
        assert off.tolist() == [2, 4, 6]
        mismatches = [d for d in report.defects if d.kind == "stats_mismatch" and d.feature == feature]
        assert [(d.detail.split("'s ")[1].split()[0], d.channels) for d in mismatches] == [("std", (2, 4, 6))]
        for name in ("min", "max"):  # exact where stats.json has them right
            np.testing.assert_array_equal(np.asarray(stats[feature][name]), getattr(values, name)(axis=0)
                                          .astype(np.float32))
        assert stats[feature]["count"] == [len(values)] and np.bincount(episode).size == 50


def test_g1_lacks_96_videos_and_its_kept_videos_match_their_rows(g1_store):
    folder = real_dataset("G1-policy-train")
    report = doctor_source(folder, videos=False, progress=False)
    assert report.defects == [] and report.checked_episodes == 100
    stored = read_report(g1_store)
    assert _kinds(stored) == {"video_missing"} and stored.checked_episodes == 100
    _missing_videos_match(stored, folder)
    assert sorted({d.episode for d in stored.defects}) == [e for e in range(100) if e not in (1, 2, 4, 5)]
