"""The store cache: ``lerobot_zarr.cache_info()`` and ``lerobot-zarr cache ls | rm | prune``.

Stores are made the way users make them (a LeRobot folder opened, a Hub repo opened at two commits of ``main``
served by the test Hub); sizes are checked against the filesystem, removal against locks and symlinks."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hub_fixtures import make_env

import lerobot_zarr
from lerobot_zarr.cli import main
from lerobot_zarr.sources.cache import cache_info, find_stores, prune_candidates, remove_store
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.utils.fileio import WriterLock


def du(path) -> int:
    return sum(os.lstat(os.path.join(r, f)).st_blocks * 512 for r, _, files in os.walk(path) for f in files)


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A cache with: a LeRobot folder's store, and two stores of org/data (main moved on between the opens)."""
    folder = write_sample_dataset(tmp_path / "folder", n_episodes=3, seed=1)
    hub_src = write_sample_dataset(tmp_path / "hubsrc", n_episodes=4, seed=2)
    with HubServer(tmp_path / "server") as server:
        server.add_repo("org/data", hub_src)
        env = make_env(monkeypatch, tmp_path, server.endpoint)
        local = lerobot_zarr.open_dataset(folder, progress=False).root
        old = lerobot_zarr.open_dataset("org/data", revision="main", episodes=[0, 2], progress=False).root
        server.commit_files("org/data", {"README.md": b"new card"})
        new = lerobot_zarr.open_dataset("org/data", revision="main", episodes=[1], progress=False).root
        yield env, server, folder, local, old, new


def test_cache_info_lists_every_store(world):
    _, _, folder, local, old, new = world
    stores = {s.path: s for s in cache_info()}
    assert set(stores) == {local, old, new}
    s = stores[local]
    assert s.kind == "local" and s.source == str(folder) and s.revision is None and s.status == "ok"
    assert (s.episodes, s.total_episodes) == (3, 3)
    assert s.size_bytes == du(local) > 0
    h_old, h_new = stores[old], stores[new]
    assert h_old.source == h_new.source == "org/data"
    assert h_old.revision == old.name and h_new.revision == new.name and old.name != new.name
    assert (h_old.episodes, h_new.episodes) == (2, 1) and h_new.total_episodes == 4
    assert h_new.refs == ("main",) and h_old.refs == ()
    assert lerobot_zarr.cache_info is cache_info
    assert find_stores("org/data") == [s for s in cache_info() if s.kind == "hub"]
    assert [s.path for s in find_stores(f"org/data@{new.name[:8]}")] == [new]
    assert [s.path for s in find_stores(str(folder))] == [local]


def test_prune_removes_old_commits_and_stale_folder_stores(world, capsys):
    _, _, folder, local, old, new = world
    shutil.rmtree(folder)
    write_sample_dataset(folder, n_episodes=2, seed=5)  # same path, new content: its old store is stale
    fresh = lerobot_zarr.open_dataset(folder, progress=False).root
    assert fresh != local
    why = {s.path: reason for s, reason in prune_candidates()}
    assert set(why) == {old, local}, why
    assert main(["cache", "prune", "--dry-run"]) == 0
    assert old.exists() and local.exists()
    assert main(["cache", "prune", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 stores" in out
    assert not old.exists() and not local.exists() and new.exists() and fresh.exists()
    assert lerobot_zarr.open_dataset("org/data", revision="main", episodes=[1], progress=False).root == new


def test_rm_by_repo_and_ls_json(world, capsys):
    env, _, _, local, old, new = world
    assert main(["cache", "ls", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {d["path"] for d in listed} == {str(local), str(old), str(new)}
    assert main(["cache", "ls"]) == 0
    text = capsys.readouterr().out
    assert "org/data" in text and "3 stores" in text
    assert main(["cache", "rm", "org/data"]) == 1  # no terminal, no --yes: nothing removed
    assert old.exists()
    capsys.readouterr()
    assert main(["cache", "rm", "org/data", "--yes"]) == 0
    assert not old.exists() and not new.exists() and local.exists()
    assert not (env.zarr_home / "hub" / "org--data").exists(), "the repo folder (and its refs) stays behind"
    assert main(["cache", "rm", "org/nothing", "--yes"]) == 1


def test_rm_refuses_a_store_being_written(world):
    _, _, _, local, _, _ = world
    # the cache's shared stores are written only by lerobot_zarr itself (more episodes fetched), under this lock
    with WriterLock(local):
        with pytest.raises(lerobot_zarr.StoreLockedError):
            remove_store(local)
        assert main(["cache", "rm", str(local), "--yes"]) == 1
    assert local.exists() and lerobot_zarr.open_dataset(local, progress=False).meta.total_episodes == 3
    remove_store(local)
    assert not local.exists()


def test_rm_refuses_symlinks_and_paths_outside_the_cache(world, tmp_path):
    env, _, _, local, _, _ = world
    link = env.zarr_home / "local" / "link-store"
    link.symlink_to(local)
    with pytest.raises(ValueError, match="symlink"):
        remove_store(link)
    outside = lerobot_zarr.open_dataset(tmp_path / "folder", root=tmp_path / "elsewhere", progress=False).root
    with pytest.raises(ValueError, match="not a store of the cache"):
        remove_store(outside)
    with pytest.raises(ValueError, match="not a store of the cache"):
        remove_store(env.zarr_home / "hub")
    assert local.exists() and outside.exists() and link.is_symlink()
    assert local not in [s.path for s in cache_info() if s.path == link]


def test_last_use_is_the_last_read(world, capsys):
    """An open that only reads a store counts as a use, whatever the filesystem's access times do (relatime, as is
    common, updates them at most once a day after a change; noatime never): `cache ls` shows it."""
    _, _, folder, local, _, _ = world
    root_doc = local / "zarr.json"
    for _ in range(2):  # read: a relatime filesystem updates the access time once, then not again today
        root_doc.read_bytes()
    read = os.stat(root_doc).st_atime_ns
    root_doc.read_bytes()
    if os.stat(root_doc).st_atime_ns != read:
        pytest.skip("this filesystem updates access times on every read (strictatime): nothing to show")
    mtime = os.stat(root_doc).st_mtime_ns
    for open_ in (lambda: lerobot_zarr.open_dataset(folder, progress=False), lambda: lerobot_zarr.open_dataset(local)):
        open_()[0]
        now = os.stat(root_doc).st_atime_ns
        assert now > read, "the read is recorded as the store's last use"
        assert os.stat(root_doc).st_mtime_ns == mtime, "the commit point's time is kept (readers use it)"
        assert {s.path: s for s in cache_info()}[local].last_used >= now / 1e9 - 1e-3
        read = now
    assert main(["cache", "ls"]) == 0
