"""The doctor on every kind of dataset LeRobot 0.6.1 writes (tests/lerobot_recorded.py records them with its own
API): each is transcoded and scanned without error, and what the doctor finds is exactly what the recordings hold,
checked on their parquet here: their 1-frame episodes, and the channels the recorder pins to a dtype's extremes in
every frame (dead channels). Skipped without lerobot."""

from __future__ import annotations

import glob
import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lerobot_recorded import KINDS, lerobot_recorded  # noqa: F401

import lerobot_zarr
from lerobot_zarr.doctor.scan import doctor_source


def _expected(folder) -> set[tuple]:
    """1-frame episodes and channels with one value in every row, read with pyarrow and numpy."""
    info = json.loads((folder / "meta/info.json").read_text())
    table = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(str(folder / "data/*/*.parquet")))],
                             promote_options="permissive")
    episodes = table.column("episode_index").to_numpy()
    out = {("short_episode", int(e), None) for e, n in zip(*np.unique(episodes, return_counts=True), strict=True)
           if n == 1}
    for name, feature in info["features"].items():
        if feature["dtype"] in ("image", "video", "string", "language") or name in (
                "timestamp", "frame_index", "episode_index", "index", "task_index"):
            continue
        values = np.array(table.column(name).to_pylist()).reshape(table.num_rows, -1)
        if any(len(np.unique(values[:, c])) == 1 for c in range(values.shape[1])):
            out.add(("dead_channel", None, name))
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_doctor_finds_what_lerobots_recordings_hold(kind, lerobot_recorded, tmp_path):  # noqa: F811
    folder = lerobot_recorded(kind)
    want = _expected(folder)
    scan = {(d.kind, d.episode, d.feature) for d in doctor_source(folder, progress=False)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", progress=False)
    stored = {(d.kind, d.episode, d.feature) for d in ds.defects}
    assert scan == stored == want
    assert ds.defects.checked_episodes == ds.meta.total_episodes
