"""Every wait of a store in a bucket's reads is bounded: a batch waiting for rows another thread of the process is
fetching (a prefetch), or for rows another thread has claimed, or fetching rows that are dropped from the mirror as
soon as they land, ends in a typed error (BucketError) instead of waiting, or fetching, without end. Each read runs
in a thread joined with a bound, so that the loops these bounds end fail the test instead of hanging it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr
from lerobot_zarr.errors import BucketError
from lerobot_zarr.sources import remote_store
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.writing.sync import push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

CAM = "observation.images.cam"
_JOIN = 60.0  # seconds a read may take here before the test calls it a hang (bounded waits end within 1 s)


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    """A store of small packs in the bucket, opened there with waits bounded at 5 s (the staged hangs end there; a
    real wait under load, e.g. for the background fetch of the numeric features, ends well within it)."""
    folder = write_sample_dataset(tmp_path / "src", n_episodes=4, lengths=(10, 20), image_keys=(CAM,), seed=2)
    local = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", progress=False, pack_bytes=1 << 14,
                                      storage={CAM: "lossless"})
    url = env.url("stores/waits")
    push_store(local.root, url, progress=False)
    monkeypatch.setattr(remote_store, "_wait_limit", lambda: 5.0)
    return lerobot_zarr.open_dataset(url, cache_bytes=1 << 20)


def read_within(fn) -> Exception | None:
    """Run ``fn`` in a thread; what it raised (None if nothing). Fails the test if it has not ended by ``_JOIN``."""
    out: list[Exception | None] = [None]

    def run() -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001  (handed to the test, whatever it is)
            out[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(_JOIN)
    assert not thread.is_alive(), "the read did not end: an unbounded wait"
    return out[0]


def cam_pack(ds, episode: int):
    store = ds._remote
    return store._pack(CAM, int(store.state.table.chunk[episode])), int(store.state.table.offset[episode])


def test_a_fetch_another_thread_never_ends_is_an_error_not_a_hang(remote):
    entry, row = cam_pack(remote, 0)
    with remote._remote._lock:
        entry.coming[row] = True  # another thread of the process fetching it (a prefetch that never ends)
    got = read_within(lambda: remote[0])
    try:
        assert isinstance(got, BucketError) and "another thread" in str(got), got
    finally:
        remote._remote._release([(entry, np.array([row]))])
    assert remote[0]["index"] == 0  # (once that thread lets go, the rows are fetched)


def test_rows_claimed_by_a_thread_that_never_lets_go_are_an_error_not_a_hang(remote):
    entry, row = cam_pack(remote, 0)
    key = (entry.name, entry.pack)
    with remote._remote._lock:
        remote._remote._claimed.setdefault(key, []).append((row, row + 1))
    got = read_within(lambda: remote[0])
    try:
        assert isinstance(got, BucketError) and "claimed by another thread" in str(got), got
    finally:
        remote._remote._forget_claim(key, row, row + 1)
    assert remote[0]["index"] == 0


def test_rows_dropped_as_soon_as_they_land_are_fetched_a_bounded_number_of_times(remote, env, monkeypatch):
    store = remote._remote
    get = store._get

    def dropped(entry, start, stop, rows):  # an evictor that does not see the batch's pins
        get(entry, start, stop, rows)
        if entry.name == CAM:
            entry.present[rows] = False

    monkeypatch.setattr(store, "_get", dropped)
    cam_pack(remote, 0)  # (its shard index fetched first)
    env.server.reset_stats()
    got = read_within(lambda: remote[0])
    assert isinstance(got, BucketError) and "still missing" in str(got), got
    cam_gets = [r for r in env.server.requests("GET") if CAM in r.path]
    assert 0 < len(cam_gets) <= remote_store._ROUNDS, len(cam_gets)
