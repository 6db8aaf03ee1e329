"""Lazy mode: episodes are fetched from the Hub the first time a sample touches them, and only then."""

from __future__ import annotations

import pickle
import re

import huggingface_hub.constants as hf_constants
import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import make_env

import lerobot_zarr
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset


@pytest.fixture
def hub(tmp_path, monkeypatch):
    src = write_sample_dataset(tmp_path / "src", n_episodes=10, lengths=(20, 40), episodes_per_file=5)
    with HubServer(tmp_path / "server") as server:
        server.add_repo("org/lazy", src, tags=["v3.0"])
        make_env(monkeypatch, tmp_path, server.endpoint)
        yield server, src


def data_requests(server, src) -> list:
    """Requests for data files other than reads of their footer (store creation reads one for the schema)."""
    return [r for r in server.requests(method="GET") if "/data/" in r.path and not _footer_read(r, src)]


def all_data_requests(server) -> list:
    return [r for r in server.requests(method="GET") if "/data/" in r.path]


def _footer_read(r, src) -> bool:
    """A read of a data file's tail for its footer: up to the end of the file, and no longer than the footer
    (several times over: HubFiles estimates it from the row groups) or 64 KiB (a small file comes whole)."""
    path = src / ("data/" + r.path.split("/data/", 1)[1])
    size = path.stat().st_size
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", r.range or "")
    start, stop = (int(m.group(1)), int(m.group(2)) + 1) if m else (0, size) if r.range is None else (-1, -1)
    footer = pq.ParquetFile(path).metadata.serialized_size + 8
    return stop == size and size - start <= max(64 * 1024, 4 * footer)


def test_lazy_fetches_on_first_touch_only(hub, tmp_path):
    server, src = hub
    reference = lerobot_zarr.open_dataset(src, root=tmp_path / "local", progress=False)
    ds = lerobot_zarr.open_dataset("org/lazy", lazy=True, progress=False)
    assert len(ds) == len(reference)
    assert not data_requests(server, src), "lazy open fetched data"
    last = len(ds) - 1  # in episode 9, in the second data file
    server.reset_stats()
    item = ds[last]
    fetched = all_data_requests(server)  # a small file comes whole with its footer (its tail)
    assert fetched and all("file-001" in r.path for r in fetched), [(r.path[-40:], r.range) for r in fetched]
    want = reference[last]
    for key in ("observation.state", "action", "index", "episode_index"):
        np.testing.assert_array_equal(item[key], want[key])
    server.reset_stats()
    ds[last - 1]  # same episode: already local
    assert not all_data_requests(server)
    assert ds.meta.materialized_episodes.sum() == 0  # meta is the state at open; the store has grown
    assert lerobot_zarr.LeRobotZarrDataset(ds.root).meta.materialized_episodes.tolist() == [False] * 9 + [True]


def test_lazy_batch_and_pickled_copy(hub, tmp_path):
    server, src = hub
    reference = lerobot_zarr.open_dataset(src, root=tmp_path / "local", progress=False)
    ds = lerobot_zarr.open_dataset("org/lazy", lazy=True, progress=False)
    copy = pickle.loads(pickle.dumps(ds))
    idx = np.arange(len(ds))
    batch, want = copy.get_batch(idx), reference.get_batch(idx)
    for key in want:
        np.testing.assert_array_equal(np.asarray(batch[key]), np.asarray(want[key]), err_msg=key)


def test_lazy_offline_names_missing_episode(hub, monkeypatch):
    server, _ = hub
    ds = lerobot_zarr.open_dataset("org/lazy", lazy=True, progress=False)
    ds[0]
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    server.reset_stats()
    offline = lerobot_zarr.open_dataset("org/lazy", lazy=True, progress=False)
    offline[0]
    with pytest.raises(lerobot_zarr.NotMaterializedError, match=r"\[9\]"):
        offline[len(offline) - 1]
    assert not server.requests()
