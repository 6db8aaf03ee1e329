"""``push_store`` checks all it can before it changes anything: a store whose writer left commits in its log (killed,
or copied while writing) is folded into one commit only once the bucket was found reachable, the credentials good,
no other publication under way and the bucket's root one this store may replace. A publication refused leaves the
local store byte for byte as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import s3_fixtures
from test_bucket_client import one_attempt  # noqa: F401  (a fixture)

import lerobot_zarr
from lerobot_zarr.errors import BucketAuthError, BucketError, CommitConflictError
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.testing.source_tests import assert_same_batches
from lerobot_zarr.writing.sync import push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    """A store whose last two commits are in its commit log (its root is format 4): a copy made while its writer,
    committing to the log, was still open (as one killed then)."""
    work = tmp_path_factory.mktemp("push_checks")
    src = write_sample_dataset(work / "src", n_episodes=4, lengths=(8, 12), seed=5)
    store = lerobot_zarr.open_dataset(src, root=work / "store", progress=False).root
    with lerobot_zarr.open_dataset(store, mode="r+") as w:
        w.fold_log(log_commits=True)
        for e in (2, 3):
            ep = lerobot_zarr.open_dataset(src, root=work / "full", progress=False).episode(e)
            w.add_episode({k: np.asarray(ep[k]) for k in ("observation.state", "action")}, task=f"logged {e}")
        shutil.copytree(store, work / "logged")
    state = read_state(work / "logged")
    assert state.logged and len(state.log_records) == 2 and len(state.table) == 6
    return work / "logged"


def contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.usefixtures("one_attempt")
def test_a_refused_publication_leaves_the_store_byte_identical(env, logged, tmp_path, monkeypatch):
    store = shutil.copytree(logged, tmp_path / "store")
    before = contents(store)
    url = env.url("pub")
    other = lerobot_zarr.open_dataset(logged.parent / "src", root=tmp_path / "other", progress=False,
                                      pack_bytes=1 << 14)
    push_store(other.root, url, progress=False)  # the bucket holds another store's commit
    with pytest.raises(CommitConflictError, match="did not publish"):
        push_store(store, url, progress=False)
    assert contents(store) == before, "a refused publication changed the store (its log folded)"
    env.server.inject_fault(path_contains="/denied/", kind="403", count=100)
    with pytest.raises(BucketAuthError):
        push_store(store, env.url("denied"), progress=False)  # credentials refused at the first request
    env.server.clear_faults()
    assert contents(store) == before
    with monkeypatch.context() as m:
        m.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there (discard): refused at once
        with pytest.raises(BucketError):
            push_store(store, env.url("unreachable"), progress=False)
    assert contents(store) == before
    report = push_store(store, env.url("fresh"), progress=False)  # all checked: the log folded, then published
    assert report.committed and not read_state(store).logged
    assert lerobot_zarr.open_dataset(env.url("fresh")).meta.total_episodes == 6
    assert_same_batches(lerobot_zarr.open_dataset(env.url("fresh")), lerobot_zarr.open_dataset(logged), "folded")
    assert push_store(store, url, progress=False, force=True).committed  # force: replaced, after the checks
