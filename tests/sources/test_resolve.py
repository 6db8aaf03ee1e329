"""``resolve_source``: one decision, store / LeRobot folder / Hub repo id, with the same errors for every entry
point; ``inspect`` takes all three."""

from __future__ import annotations

import pytest

import lerobot_zarr
from lerobot_zarr.sources.resolve import resolve_source
from lerobot_zarr.testing.sample_data import write_sample_dataset


@pytest.fixture
def folder_and_store(tmp_path):
    folder = write_sample_dataset(tmp_path / "src", n_episodes=3, seed=2)
    store = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", episodes=[0, 2], progress=False).root
    return folder, store


def test_kinds(folder_and_store, tmp_path):
    folder, store = folder_and_store
    assert resolve_source(folder).kind == "folder" and resolve_source(str(folder)).path == folder
    assert resolve_source(store).kind == "store"
    hub = resolve_source("org/name", revision="v3.0")
    assert (hub.kind, hub.repo_id, hub.revision, str(hub)) == ("hub", "org/name", "v3.0", "org/name@v3.0")


def test_errors(folder_and_store, tmp_path):
    folder, store = folder_and_store
    (tmp_path / "empty").mkdir()
    with pytest.raises(lerobot_zarr.SourceNotFoundError, match="neither a LeRobot dataset folder"):
        resolve_source(tmp_path / "empty")
    with pytest.raises(lerobot_zarr.SourceNotFoundError, match="no such folder"):
        resolve_source(str(tmp_path / "missing" / "x"))
    with pytest.raises(ValueError, match="applies to Hub repositories"):
        resolve_source(folder, revision="main")
    with pytest.raises(ValueError, match="applies to Hub repositories"):
        resolve_source(store, revision="main")
    for bad in ("a/b/c", "org/../x"):
        with pytest.raises(ValueError, match="not a Hub dataset repo id"):
            resolve_source(bad, token="t")
        with pytest.raises(ValueError, match="not a Hub dataset repo id"):
            resolve_source(bad, hub_first=True)
    for path in ("../x", "./x", "/nonexistent/x", "~/nonexistent-x"):  # written as paths: a missing folder
        with pytest.raises(lerobot_zarr.SourceNotFoundError, match="no such folder"):
            resolve_source(path, hub_first=True)
        with pytest.raises(lerobot_zarr.SourceNotFoundError, match="no such folder"):
            lerobot_zarr.inspect(path)


def test_inspect_takes_folders_and_stores(folder_and_store):
    folder, store = folder_and_store
    a, b = lerobot_zarr.inspect(folder), lerobot_zarr.inspect(store)
    assert a.total_episodes == b.total_episodes == 3
    assert a.total_frames == b.total_frames and a.tasks == b.tasks and list(a.features) == list(b.features)
    assert a.materialized_episodes.tolist() == [False] * 3
    assert b.materialized_episodes.tolist() == [True, False, True]
