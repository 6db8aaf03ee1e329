"""Our index file next to a pushed dataset: a partial open reads it plus one range request per episode (and, for
big datasets whose footers are not inlined, one exact footer request per data file); a stale index is ignored."""

from __future__ import annotations

import numpy as np
import pytest
from hub_fixtures import make_env

import lerobot_zarr
import lerobot_zarr.lerobot.index_file as hub_index
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

TOKEN = "hf_write"


@pytest.fixture
def pushed(tmp_path, monkeypatch):
    src = write_sample_dataset(tmp_path / "src", n_episodes=12)
    store = lerobot_zarr.open_dataset(src, root=tmp_path / "store", progress=False)
    with HubServer(tmp_path / "server", tokens={TOKEN: "alice"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        yield server, store, tmp_path


def _data_gets(server) -> list:
    return [r for r in server.requests("GET") if "/data/" in r.path]


def _equal(a, b) -> bool:
    x, y = a.get_batch(np.arange(len(a))), b.get_batch(np.arange(len(b)))
    return all(np.array_equal(x[k], y[k]) for k in x if k != "task") and x["task"] == y["task"]


@pytest.mark.parametrize("inline", [True, False])
def test_partial_open_uses_the_index(pushed, monkeypatch, inline):
    server, store, tmp = pushed
    if not inline:
        monkeypatch.setattr(hub_index, "INLINE_FOOTERS_MAX", 0)
    store.push("org/ds", token=TOKEN, progress=False)
    server.reset_stats()
    ds = lerobot_zarr.open_dataset("org/ds", episodes=[3, 7], root=tmp / f"partial-{inline}", progress=False)
    assert _equal(ds, lerobot_zarr.LeRobotZarrDataset(store.root, episodes=[3, 7]))
    assert len(server.requests("GET", "/meta/lerobot_zarr_index.json")) == 1
    assert not [r for r in server.requests("GET") if "/meta/" in r.path and "lerobot_zarr_index" not in r.path]
    assert len(_data_gets(server)) == 2 + (0 if inline else 1), [r.range for r in _data_gets(server)]


def test_a_stale_index_is_ignored(pushed):
    """A repo changed by another tool after our push: the index describes other files, so it is not used."""
    server, store, tmp = pushed
    store.push("org/ds", token=TOKEN, progress=False)
    other = write_sample_dataset(tmp / "other", n_episodes=12, seed=5)  # same layout, other values
    files = {p.relative_to(other).as_posix(): p.read_bytes() for p in other.rglob("*") if p.is_file()}
    server.commit_files("org/ds", files)  # meta/ and data/ replaced; our index file stays, now stale
    server.reset_stats()
    ds = lerobot_zarr.open_dataset("org/ds", revision="main", episodes=[3], root=tmp / "stale", progress=False)
    assert server.requests("GET", "/meta/info.json"), "the repo's own metadata was read"
    want = lerobot_zarr.open_dataset(other, root=tmp / "other-store", episodes=[3], progress=False)
    np.testing.assert_array_equal(ds.get_batch(np.arange(len(ds)))["action"],
                                  want.get_batch(np.arange(len(want)))["action"])


def test_partial_open_without_index_reads_one_footer(tmp_path, monkeypatch):
    """A repo written by LeRobot (no index): opening one episode of the second data file reads that file's footer
    and row group only, nothing of the first file."""
    src = write_sample_dataset(tmp_path / "src", n_episodes=8, episodes_per_file=4)
    with HubServer(tmp_path / "server") as server:
        server.add_repo("org/plain", src, tags=["v3.0"])
        make_env(monkeypatch, tmp_path, server.endpoint)
        ds = lerobot_zarr.open_dataset("org/plain", episodes=[6], progress=False)
        assert ds.episodes.tolist() == [6]
        touched = {r.path.rsplit("/", 1)[-1] for r in _data_gets(server)}
        assert touched == {"file-001.parquet"}, touched
